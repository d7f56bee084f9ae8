"""The batched Bradley-Terry fit at its former import path; the code is
:mod:`saber_lib.judging.bt_solvers`."""
from ..judging.bt_solvers import fit_bt_batch, rescale_rows  # noqa: F401
