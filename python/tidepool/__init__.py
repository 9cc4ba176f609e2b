"""tidepool: a caching allocator for GPU device memory.

    import tidepool.torch
    tidepool.torch.enable()          # before the first CUDA allocation

    import tidepool.cupy
    tidepool.cupy.enable()

The C library does the work; this package finds (or builds) it and plugs it into the frameworks.
"""

import os as _os
import re as _re

from ._lib import TidepoolError, library_path  # noqa: F401

__all__ = ["TidepoolError", "library_path"]


def _header_version():
    """The version include/tidepool.h defines, the one place it is written: the copy the wheel carries
    (tidepool/include/), or the repository's when the package runs from python/ in a clone."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for header in (_os.path.join(here, "include", "tidepool.h"),
                   _os.path.join(here, _os.pardir, _os.pardir, "include", "tidepool.h")):
        try:
            with open(header) as f:
                text = f.read()
        except OSError:
            continue
        parts = [_re.search(r"#define TIDE_VERSION_%s (\d+)" % p, text) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return "unknown"


__version__ = _header_version()
