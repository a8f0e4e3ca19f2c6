"""progress= of build, verify and layerinit.torch.init_/make: f(done_bytes, total_bytes) on the calling
thread, done never decreasing, the first call (0, total) (build, init_), the last (total, total), total the
bytes made; what f raises (KeyboardInterrupt included) stops the work and is raised, memory given back;
True draws a tqdm bar."""
import signal
import sys

import pytest
import torch

import layerinit
import layerinit.torch as lt


def nbytes(shape, dtype):
    n = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
    for d in shape:
        n *= d
    return n


def plan_bytes(model, **kw):
    return sum(nbytes(shape, dtype) for _, shape, dtype, _, _ in layerinit.plan(model, **kw).tensors())


def recorder():
    calls = []
    return calls, lambda done, total: calls.append((done, total))


def check_calls(calls, total):
    assert calls[-1] == (total, total)
    assert all(t == total for _, t in calls)
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and dones[-1] == total


@pytest.mark.parametrize("layout", ["per-layer", "stacked"])
def test_build_reports_each_part(layout):
    calls, f = recorder()
    arrays = layerinit.build("llama-tiny", layout=layout, progress=f)
    total = plan_bytes("llama-tiny", layout=layout)
    assert total == sum(a.nbytes for a in arrays.values()) == 500864
    # (0, total), then one call per part: the tensors before the layers, each of the 4 layers, those after.
    assert len(calls) == 1 + 1 + 4 + 1 and calls[0] == (0, total)
    check_calls(calls, total)
    embed = nbytes((512, 64), "bf16")
    assert calls[1] == (embed, total)
    layer = (calls[5][0] - calls[1][0]) // 4
    assert [d for d, _ in calls[1:6]] == [embed + k * layer for k in range(5)]


def test_build_of_a_rank_reports_its_pieces():
    calls, f = recorder()
    arrays = layerinit.build("llama-tiny", mesh={"tp": 2}, rank=1, layout="stacked", progress=f)
    total = sum(a.nbytes for a in arrays.values())
    assert total == 251008
    assert calls[0] == (0, total) and len(calls) == 7
    check_calls(calls, total)


def test_verify_reports_the_bytes_compared():
    sd = {k: torch.from_dlpack(v) for k, v in layerinit.build("llama-tiny", dtype="fp32").items()}
    total = plan_bytes("llama-tiny", dtype="fp32")
    calls, f = recorder()
    assert layerinit.verify(sd, "llama-tiny", dtype="fp32", progress=f).ok
    check_calls(calls, total)
    assert len(calls) >= len(sd)  # at least one call per tensor
    # A missing tensor adds no bytes: the last call is (total, total) all the same.
    del sd["model.norm.weight"]
    calls, f = recorder()
    report = layerinit.verify(sd, "llama-tiny", dtype="fp32", progress=f)
    assert report.missing == 1
    check_calls(calls, total)
    assert calls[-2][0] == total - nbytes((64,), "fp32")


def test_verify_of_a_checkpoint_reports(tmp_path, cli):
    import subprocess
    subprocess.run([cli, "emit", "--preset", "llama-tiny", "--backend", "cpu", "--format", "safetensors", "-o",
                    str(tmp_path / "ck")], check=True, capture_output=True)
    calls, f = recorder()
    assert layerinit.verify(tmp_path / "ck", progress=f).ok
    check_calls(calls, plan_bytes("llama-tiny"))


class Stop(Exception):
    pass


def stop_at(k):
    calls = []

    def f(done, total):
        calls.append(done)
        if len(calls) == k:
            raise Stop(f"call {k}")
    return calls, f


def test_an_exception_in_progress_stops_the_build_and_frees_it():
    before = layerinit.memory_stats()["current_bytes"]
    calls, f = stop_at(3)
    with pytest.raises(Stop, match="^call 3$"):
        layerinit.build("llama-tiny", progress=f)
    assert len(calls) == 3
    assert layerinit.memory_stats()["current_bytes"] == before
    calls, f = stop_at(1)  # the (0, total) call, before anything is built
    with pytest.raises(Stop):
        layerinit.build("llama-tiny", mesh={"tp": 2}, rank=0, progress=f)
    assert layerinit.memory_stats()["current_bytes"] == before


def test_an_exception_in_progress_stops_the_verify():
    sd = {k: torch.from_dlpack(v) for k, v in layerinit.build("llama-tiny").items()}
    calls, f = stop_at(2)
    with pytest.raises(Stop, match="^call 2$"):
        layerinit.verify(sd, "llama-tiny", progress=f)
    assert len(calls) == 2


def test_ctrl_c_in_progress_is_a_keyboard_interrupt():
    # SIGINT while a report runs: Python's handler raises KeyboardInterrupt there, which stops the work.
    before = layerinit.memory_stats()["current_bytes"]

    def f(done, total):
        if done:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        layerinit.build("llama-tiny", progress=f)
    assert layerinit.memory_stats()["current_bytes"] == before
    sd = {k: torch.from_dlpack(v) for k, v in layerinit.build("llama-tiny").items()}
    with pytest.raises(KeyboardInterrupt):
        layerinit.verify(sd, "llama-tiny", progress=f)


def test_progress_true_draws_a_tqdm_bar(capsys):
    layerinit.build("llama-tiny", progress=True)
    err = capsys.readouterr().err
    assert "build: 100%" in err and "489k/489k" in err


def test_progress_true_without_tqdm_is_refused_before_any_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    made = layerinit.memory_stats()["total_count"]
    why = r"^progress=True draws a tqdm bar, and tqdm is not installed: pip install tqdm, or pass a function"
    with pytest.raises(ValueError, match=why):
        layerinit.build("llama-tiny", progress=True)
    with pytest.raises(ValueError, match=why):
        layerinit.verify({}, "llama-tiny", progress=True)
    with pytest.raises(ValueError, match=why):
        lt.init_(torch.nn.Linear(4, 4), recipe="hf", progress=True)
    assert layerinit.memory_stats()["total_count"] == made


@pytest.mark.parametrize("bad", [1, "yes", 0.5, [print]], ids=repr)
def test_other_progress_values_are_refused(bad):
    with pytest.raises(ValueError, match=r"^progress must be None, True or a function f\(done_bytes, total_bytes\), got "):
        layerinit.build("llama-tiny", progress=bad)
    with pytest.raises(ValueError, match=r"^progress must be None"):
        layerinit.verify({}, "llama-tiny", progress=bad)
    with pytest.raises(ValueError, match=r"^progress must be None"):
        lt.init_(torch.nn.Linear(4, 4), recipe="hf", progress=bad)


def test_false_and_none_report_nothing():
    assert len(layerinit.build("llama-tiny", progress=False)) == len(layerinit.build("llama-tiny", progress=None))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.proj = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 32, bias=False, dtype=torch.bfloat16)


def test_init_reports_each_parameter():
    net = Net()
    calls, f = recorder()
    assert lt.init_(net, recipe="hf", progress=f) is net
    sizes = [p.numel() * p.element_size() for p in net.parameters()]
    total = sum(sizes)
    assert total == 32 * 8 * 4 + (8 * 16 + 16) * 4 + 16 * 32 * 2
    assert len(calls) == 1 + len(sizes) and calls[0] == (0, total)
    check_calls(calls, total)
    # The same values as without progress (one call for all).
    other = lt.init_(Net(), recipe="hf")
    for (n, a), (_, b) in zip(net.named_parameters(), other.named_parameters()):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), n


def test_init_stops_at_an_exception_in_progress():
    net = Net()
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
    calls, f = stop_at(2)  # after the first parameter
    with pytest.raises(Stop):
        lt.init_(net, recipe="hf", progress=f)
    written = [bool(p.count_nonzero()) for p in net.parameters()]
    assert written == [True, False, False, False]


def test_make_reports():
    calls, f = recorder()
    net = lt.make(lambda: torch.nn.Linear(8, 4), progress=f)
    total = (8 * 4 + 4) * 4
    assert calls == [(0, total), (8 * 4 * 4, total), (total, total)]
    assert isinstance(net, torch.nn.Linear)
