"""Files the package reads (a spec file, a Hugging Face config.json): the C++ library's one reader, as the
CLI's --spec and --hf-config read them: regular files only (a FIFO would wait for a writer forever,
/dev/zero never ends), at most 16 MiB, and errors with the OS's reason, each a ValueError of one line.
The calls that used to hang or exhaust memory run in a child process with a timeout and an address
space cap, so a regression fails instead of taking the machine."""
import os
import subprocess
import sys
import textwrap

import pytest

import layerinit


def refusals(calls):
    """Runs each (function, argument) of `calls` (names in layerinit, e.g. ("build", "/dev/zero")) in
    one child of 2 GiB of address space and 30 s; the ValueError line of each, in order."""
    code = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        import layerinit
        for fn, arg in zip(sys.argv[1::2], sys.argv[2::2]):
            try:
                getattr(layerinit, fn)(arg)
                print("accepted")
            except ValueError as e:
                print(e)
        """
    )
    args = [a for c in calls for a in c]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_a_fifo_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    (tmp_path / "model").mkdir()
    config = tmp_path / "model" / "config.json"
    os.mkfifo(config)
    model = str(tmp_path / "model")
    assert refusals([("build", str(fifo)), ("spec", str(fifo)), ("plan", str(fifo)), ("hf_spec", str(config)),
                     ("hf_spec", model), ("build", model)]) == [
        f"spec file '{fifo}' is not a regular file",
        f"spec file '{fifo}' is not a regular file",
        f"spec file '{fifo}' is not a regular file",
        f"Hugging Face config '{config}' is not a regular file",
        f"Hugging Face config '{config}' is not a regular file",
        f"Hugging Face config '{config}' is not a regular file",
    ]


def test_dev_zero_is_refused_at_once():
    # Python read /dev/zero until MemoryError (13 s); the CLI refused it at once.
    assert refusals([("build", "/dev/zero"), ("hf_spec", "/dev/zero")]) == [
        "spec file '/dev/zero' is not a regular file",
        "Hugging Face config '/dev/zero' is not a regular file",
    ]


def test_a_spec_file_past_16_mib_is_refused(tmp_path):
    # The CLI's limit: a valid spec padded with spaces to the cap is read, one byte more is not.
    small = '{"name": "pad", "pre": [{"name": "w", "shape": [4], "role": "norm_weight"}]}'
    at_cap, past_cap = tmp_path / "at_cap.json", tmp_path / "past_cap.json"
    at_cap.write_text(small + " " * ((16 << 20) - len(small)))
    past_cap.write_text(small + " " * ((16 << 20) + 1 - len(small)))
    assert layerinit.spec(str(at_cap)).name == "pad"
    with pytest.raises(ValueError) as e:
        layerinit.spec(str(past_cap))
    assert str(e.value) == f"spec file '{past_cap}' is larger than 16 MiB"


def test_an_unreadable_file_says_why(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError) as e:
        layerinit.build(str(missing))
    assert str(e.value) == f"spec file '{missing}' cannot be read: No such file or directory"
    with pytest.raises(ValueError) as e:
        layerinit.hf_spec(tmp_path)  # a directory without config.json
    assert str(e.value) == f"Hugging Face config '{tmp_path / 'config.json'}' cannot be read: No such file or directory"
