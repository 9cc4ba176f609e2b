"""The GPU Python tests' report: each check prints ok or FAIL with what it showed; finish() gives the
exit status (1 if any failed)."""

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def finish():
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all passed")
    return 0
