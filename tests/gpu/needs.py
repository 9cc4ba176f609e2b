"""What a GPU test needs, checked one need at a time, so that a skip (exit 77) says exactly which one
is missing: a module that is not installed, or no GPU."""
import sys


def modules(*needs):
    """needs: (module, the name a user installs) pairs, imported in order; the first that fails skips."""
    for module, what in needs:
        try:
            __import__(module)
        except Exception as e:  # noqa: BLE001 - an import that fails for any reason leaves nothing to test
            print("skipped: %s is not installed or does not load (%s: %s)" % (what, type(e).__name__, e))
            sys.exit(77)


def gpu(count, who):
    """count(): the GPUs `who` sees; none, or an error asking, skips."""
    try:
        n = count()
    except Exception as e:  # noqa: BLE001 - the frameworks raise their own errors without a driver
        print("skipped: %s finds no CUDA driver or GPU (%s: %s)" % (who, type(e).__name__, e))
        sys.exit(77)
    if n == 0:
        print("skipped: %s sees no GPU" % who)
        sys.exit(77)
