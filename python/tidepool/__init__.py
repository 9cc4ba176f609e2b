"""tidepool: a caching allocator for GPU device memory.

    import tidepool.torch
    tidepool.torch.enable()          # before the first CUDA allocation

    import tidepool.cupy
    tidepool.cupy.enable()

The C library does the work; this package finds (or builds) it and plugs it into the frameworks.
"""

from ._lib import TidepoolError, library_path  # noqa: F401

__all__ = ["TidepoolError", "library_path"]
__version__ = "0.1.0"
