"""Ctrl-C during `retune` (SIGINT to the whole process group, as a terminal sends it): the parent stops its
evaluation worker and compile processes, returns what it has with `interrupted` set, and no worker prints a
traceback or holds the exit."""

import os
import signal
import subprocess
import sys
import textwrap
import time

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    import autotune
    from autotune.db import ConfigStore
    from autotune.engine import retune as retuning
    from autotune.engine.plan import SearchOptions

    if __name__ == "__main__":
        with ConfigStore(sys.argv[1]) as store:
            report = retuning.retune(
                [autotune.get(n) for n in ("softmax", "layer_norm")],
                budget_s=600,
                store=store,
                options=SearchOptions(trials=50, examples=20, final_examples=20, isolate=True),
                dtypes=(torch.float32,),
                compile_workers=2,
                on_start=lambda study, i, n: print("started", study.label, flush=True),
            )
        print("returned", report.interrupted, [o.status for o in report.outcomes], flush=True)
    """
)


def test_ctrl_c_ends_a_retune_with_workers_promptly(tmp_path):
    script = tmp_path / "retune_then_ctrl_c.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "r.sqlite")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, which the SIGINT below goes to, as a terminal's would
    )
    try:
        assert process.stdout.readline().startswith("started softmax fp32")
        time.sleep(3)  # compiles and checks in flight in the workers
        os.killpg(process.pid, signal.SIGINT)
        interrupted = time.monotonic()
        out, err = process.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, err
    assert "returned True ['not run', 'not run']" in out
    assert took < 20, f"{took:.1f} s from Ctrl-C to exit"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
