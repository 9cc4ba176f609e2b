"""The Python tests' one assertion: each check prints ok or FAIL with what it checked, and done()
ends the test with exit status 1 if any failed."""
import sys

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    else:
        print("ok: " + what)


def done():
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)
