"""kernels/paths.py's choice of implementation per call signature, with fake candidates and timer,
and its table on disk (runtime/tuned.py)."""
import json

import pytest

from cudakit.kernels import paths
from cudakit.runtime.tuned import TunedTable


@pytest.fixture
def table(tmp_path, monkeypatch):
    t = TunedTable("paths", lambda: ["test-gpu"])
    monkeypatch.setattr(t, "_file", lambda: tmp_path / "paths.json")
    monkeypatch.setattr(paths, "_on_disk", t)
    paths.reset()
    yield t
    paths.reset()


def _cands(calls, declines=()):
    def make(name):
        def fn():
            calls.append(name)
            return None if name in declines else name.upper()
        return fn
    return [(n, make(n)) for n in ("cudnn", "triton")]


def test_fastest_is_chosen_once_and_stored(table, tmp_path):
    calls = []
    times = {"cudnn": 2.0, "triton": 1.0}
    timer = lambda fn: times[fn().lower()]   # noqa: E731 - each timing runs the candidate
    assert paths.run("conv2d", ("k", 1), _cands(calls), timer) == "TRITON"
    assert paths.last_paths() == {"conv2d": "triton"}
    assert json.loads((tmp_path / "paths.json").read_text()) == {repr(("conv2d", ("k", 1))): "triton"}
    calls.clear()
    assert paths.run("conv2d", ("k", 1), _cands(calls), timer) == "TRITON"
    assert calls == ["triton"]   # chosen: the other is not run again


def test_a_new_process_reads_the_choice(table):
    table.put(repr(("attention", ("s",))), "triton")
    paths.reset()
    calls = []
    assert paths.run("attention", ("s",), _cands(calls), timer=lambda fn: pytest.fail("timed again")) == "TRITON"
    assert calls == ["triton"]


def test_a_declining_candidate_is_not_timed(table):
    calls = []
    out = paths.run("conv2d", ("d",), _cands(calls, declines={"cudnn"}), timer=lambda fn: fn() and 1.0)
    assert out == "TRITON" and paths.last_paths()["conv2d"] == "triton"


def test_a_choice_made_while_a_candidate_declined_for_now_stays_off_the_disk(table, tmp_path):
    """A candidate that declines for a passing reason (paths.declined_for_now: no memory at that
    moment) leaves the choice made without it in this process only; a later process times again."""
    def short_of_memory():
        paths.declined_for_now()
        return None
    cands = [("materialized", short_of_memory), ("triton", lambda: "TRITON")]
    assert paths.run("attention_backward", ("m",), cands, timer=lambda fn: fn() and 1.0) == "TRITON"
    assert paths.chosen("attention_backward", ("m",)) == "triton"
    assert not (tmp_path / "paths.json").exists() or repr(("attention_backward", ("m",))) not in (
        json.loads((tmp_path / "paths.json").read_text()))
    paths.reset()   # a new process: both timed again, and this time the choice is stored
    times = {"MAT": 1.0, "TRITON": 2.0}
    cands = [("materialized", lambda: "MAT"), ("triton", lambda: "TRITON")]
    assert paths.run("attention_backward", ("m",), cands, timer=lambda fn: times[fn()]) == "MAT"
    assert json.loads((tmp_path / "paths.json").read_text())[repr(("attention_backward", ("m",)))] == "materialized"


def test_a_candidate_that_declines_while_timed_is_not_chosen_on_that_time(table, tmp_path):
    """Accepted at the warm-up, declined in its timed calls (no memory beside the flush buffer):
    those calls returned at once, so its time is dropped and the choice stays off the disk."""
    state = {"calls": 0}

    def flaky():
        state["calls"] += 1
        return "PARTS" if state["calls"] == 1 else None
    cands = [("triton", lambda: "ONE"), ("triton-keys-in-2-parts", flaky)]
    times = {"ONE": 1.0, None: 0.0}
    assert paths.run("attention", ("p",), cands, timer=lambda fn: times[fn()]) == "ONE"
    assert paths.chosen("attention", ("p",)) == "triton"
    assert not (tmp_path / "paths.json").exists() or repr(("attention", ("p",))) not in (
        json.loads((tmp_path / "paths.json").read_text()))


def test_the_chosen_candidate_gives_the_result_when_another_was_timed_after_it(table):
    """Candidates may write the same output arrays (the attention forward's key parts): the first
    call returns what the chosen one computes, as every later call does."""
    out = {}

    def writer(name):
        def fn():
            out["value"] = name
            return out
        return fn
    times = {"one": 1.0, "parts": 2.0}
    timer = lambda fn: times[fn()["value"]]   # noqa: E731
    got = paths.run("attention", ("w",), [("triton", writer("one")), ("parts", writer("parts"))], timer)
    assert got["value"] == "one"


def test_no_autotune_takes_the_first_that_accepts(table, monkeypatch):
    from cudakit import config
    monkeypatch.setenv("CUDAKIT_AUTOTUNE", "0")
    monkeypatch.setattr(config, "_settings", None)
    calls = []
    assert paths.run("conv2d", ("n",), _cands(calls), timer=lambda fn: pytest.fail("timed")) == "CUDNN"
    assert calls == ["cudnn"]
    monkeypatch.setattr(config, "_settings", None)


def test_corrupt_file_is_noted_and_rewritten(table, tmp_path):
    from cudakit import fallbacks
    (tmp_path / "paths.json").write_text("{not json")
    calls = []
    paths.run("conv2d", ("c",), _cands(calls), timer=lambda fn: 1.0 if fn() == "CUDNN" else 2.0)
    assert any(k.startswith("autotune:") for k in fallbacks.taken())
    assert json.loads((tmp_path / "paths.json").read_text()) == {repr(("conv2d", ("c",))): "cudnn"}


def test_cudnn_setting(monkeypatch):
    from cudakit import config
    from cudakit.errors import ConfigError
    for v, want in (("", "auto"), ("auto", "auto"), ("0", "0"), ("off", "0"), ("1", "1"), ("yes", "1")):
        monkeypatch.setenv("CUDAKIT_CUDNN", v)
        assert config.Settings.from_env().cudnn == want
    monkeypatch.setenv("CUDAKIT_CUDNN", "maybe")
    with pytest.raises(ConfigError, match="CUDAKIT_CUDNN='maybe'"):
        config.Settings.from_env()


def test_a_pick_made_while_capturing_is_not_kept(table, monkeypatch):
    """Under capture nothing is timed (it would synchronise): the first candidate that accepts runs,
    and the signature is timed on its first call outside a capture."""
    from cudakit import graphs
    monkeypatch.setattr(graphs, "capturing", lambda: object())
    calls = []
    assert paths.run("conv2d", ("cap",), _cands(calls), timer=lambda fn: pytest.fail("timed")) == "CUDNN"
    assert paths.chosen("conv2d", ("cap",)) is None
    monkeypatch.setattr(graphs, "capturing", lambda: None)
    times = {"CUDNN": 2.0, "TRITON": 1.0}
    assert paths.run("conv2d", ("cap",), _cands(calls), timer=lambda fn: times[fn()]) == "TRITON"
    assert paths.chosen("conv2d", ("cap",)) == "triton"


def test_a_chosen_path_that_declines_a_call_hands_it_to_the_others(table):
    calls = []
    paths.run("conv2d", ("d2",), _cands(calls), timer=lambda fn: 1.0 if fn() == "CUDNN" else 2.0)
    assert paths.chosen("conv2d", ("d2",)) == "cudnn"
    out = paths.run("conv2d", ("d2",), _cands(calls, declines={"cudnn"}), timer=lambda fn: 1.0)
    assert out == "TRITON"


def test_a_table_of_config_indices_rejects_other_values(tmp_path, monkeypatch):
    """The Triton autotuner's table (runtime/triton.Autotuned): config indices below the count."""
    import json as _json
    from cudakit import fallbacks
    t = TunedTable("k", lambda: ["gpu"], valid=lambda v: isinstance(v, int) and 0 <= v < 2, what="k's configs")
    monkeypatch.setattr(t, "_file", lambda: tmp_path / "k.json")
    (tmp_path / "k.json").write_text(_json.dumps({"a": 1}))
    assert t.get("a") == 1
    t.put("b", 0, save=False)
    assert _json.loads((tmp_path / "k.json").read_text()) == {"a": 1}   # kept in memory only
    t.put("c", 1)
    assert _json.loads((tmp_path / "k.json").read_text()) == {"a": 1, "b": 0, "c": 1}
    (tmp_path / "k.json").write_text(_json.dumps({"a": 5}))
    t.forget()
    monkeypatch.setattr(t, "_file", lambda: tmp_path / "k.json")
    assert t.get("a") is None
    assert any("k's configs are timed again" in why for why in fallbacks.taken().values())


def test_candidates_are_timed_in_interleaved_rounds(table):
    """Each candidate once a round, A B A B ... (a drift of the clocks hits all alike), its time the
    median of its rounds: one disturbed measurement does not decide."""
    order = []
    spikes = {"cudnn": [1.0, 1.0, 1.0], "triton": [0.5, 1.5, 1.5]}   # (triton's first round disturbed)

    def timer(fn):
        name = fn().lower()
        order.append(name)
        return spikes[name][sum(1 for o in order if o == name) - 1]
    assert paths.run("conv2d", ("r",), _cands([]), timer) == "CUDNN"
    assert order == ["cudnn", "triton"] * paths._ROUNDS



def test_kept_counts_this_process_choices_and_the_disk_by_op(table):
    """paths.kept (what `cudakit info` prints): {op: {path: signatures}} over this process's choices
    and the ones on disk, a signature counted once where both hold it."""
    table.put(repr(("conv2d", ("a",))), "cudnn")
    table.put(repr(("conv2d", ("b",))), "triton")
    table.put("not a signature", "cudnn")   # (a key that is no (op, key) repr is skipped)
    paths.reset()
    times = {"CUDNN": 1.0, "TRITON": 2.0}
    paths.run("conv2d", ("c",), _cands([]), timer=lambda fn: times[fn()])
    paths.run("conv2d", ("a",), _cands([]), timer=lambda fn: pytest.fail("timed again"))
    paths.run("attention", ("s",), _cands([]), timer=lambda fn: times[fn()])
    assert paths.kept() == {"conv2d": {"cudnn": 2, "triton": 1}, "attention": {"cudnn": 1}}


def test_ran_records_a_path_taken_without_a_choice(table):
    paths.ran("attention", "triton")
    assert paths.last_paths() == {"attention": "triton"}
    assert paths.kept() == {}   # (nothing chosen: kept lists timed or stored choices only)
