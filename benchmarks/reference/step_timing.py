"""Shared by the CPU step references (resnet20_time.py, lstm_lm_time.py): the best
wall time of a training step, as `benchmarks::best_of` measures ours."""
import time


def best_ms(step, repeats, warmup=2):
    """Runs `step` `warmup` times untimed, then `repeats` times (at least once); returns
    the fastest run in milliseconds."""
    for _ in range(warmup):
        step()
    best = float("inf")
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best * 1e3
