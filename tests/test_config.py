from pathlib import Path

import pytest
import yaml

from saber_lib.core import config as cfg

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["paper", "demo", "tiny"])
def test_shipped_profiles_validate(name):
    p = cfg.load_profile(ROOT / "params" / f"{name}.yaml")
    assert p.values["tournament"]["bt_alpha"] == 0.5


def test_paper_profile_has_the_papers_numbers():
    v = cfg.load_profile(ROOT / "params" / "paper.yaml").values
    assert v["topics"]["tau"] == 0.85
    assert v["thresholds"]["K"] == 50 and v["thresholds"]["Q_min"] == 150
    assert v["tournament"]["rounds"] == 20
    assert (v["corpus"]["minhash_bands"], v["corpus"]["minhash_rows"], v["corpus"]["shingle_size"]) == (14, 8, 5)
    assert v["select"]["n_queries"] == 1000
    assert v["evaluate"]["ndcg_k"] == 10 and v["evaluate"]["n_bootstrap"] == 1000


def test_keys_are_unique_across_flattened_sections():
    keys = cfg.flat_keys()
    assert keys["tau"] == "topics"


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_inheritance_and_override(tmp_path):
    parent = tmp_path / "paper.yaml"
    parent.write_text((ROOT / "params" / "paper.yaml").read_text())
    child = _write(tmp_path, "child.yaml", {"inherit": "paper.yaml", "thresholds": {"K": 7}})
    p = cfg.load_profile(child)
    assert p.values["thresholds"]["K"] == 7
    assert p.values["thresholds"]["Q_min"] == 150
    assert p.origin[("thresholds", "K")] == child.resolve()


@pytest.mark.parametrize("patch, fragment", [
    ({"thresholds": {"Kk": 3}}, "unknown key thresholds.Kk"),
    ({"nosuch": {"a": 1}}, "unknown section 'nosuch'"),
    ({"thresholds": {"K": "many"}}, "thresholds.K: expected an integer"),
    ({"topics": {"tau": 1.5}}, "topics.tau: 1.5 is above the maximum 1.0"),
    ({"tournament": {"schedule": "knockout"}}, "tournament.schedule: 'knockout' is not one of"),
    ({"corpus": {"sources": ["math", "math"]}}, "corpus.sources: a source is listed twice"),
])
def test_bad_profiles_name_key_and_file(tmp_path, patch, fragment):
    (tmp_path / "paper.yaml").write_text((ROOT / "params" / "paper.yaml").read_text())
    bad = _write(tmp_path, "bad.yaml", {"inherit": "paper.yaml", **patch})
    with pytest.raises(cfg.ProfileError) as e:
        cfg.load_profile(bad)
    assert fragment in str(e.value)
    assert "bad.yaml" in str(e.value)


def test_missing_key_is_reported(tmp_path):
    data = yaml.safe_load((ROOT / "params" / "paper.yaml").read_text())
    del data["select"]["n_queries"]
    bad = _write(tmp_path, "incomplete.yaml", data)
    with pytest.raises(cfg.ProfileError, match="missing key select.n_queries"):
        cfg.load_profile(bad)


def test_yaml_syntax_error_names_line(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("run:\n  seed: 0\n  threads: [1,\n")
    with pytest.raises(cfg.ProfileError, match=r"broken.yaml line \d+"):
        cfg.load_profile(bad)
