import pytest

from cudakit import config


@pytest.mark.parametrize("text,expected", [
    ("8GiB", (8 * 2**30, None)), ("512MB", (512 * 10**6, None)), ("1024", (1024, None)),
    (4096, (4096, None)), ("80%", (None, 0.8)), ("1.5 gib", (int(1.5 * 2**30), None)),
])
def test_parse_size(text, expected):
    assert config.parse_size(text) == expected


@pytest.mark.parametrize("bad", ["eight gigs", "150%", "0%", "-5", "5 parsecs"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="memory"):
        config.parse_size(bad)


def test_settings_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDAKIT_BACKEND", "CPU")
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUDAKIT_LAUNCH_BLOCKING", "1")
    s = config.reload()
    assert (s.backend, s.cache_dir, s.launch_blocking) == ("cpu", tmp_path, True)
    monkeypatch.undo()
    config.reload()
