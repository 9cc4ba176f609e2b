"""What every workload generator writes with: a trace being recorded, as a PyTorch program would make it.

A generator models how a kind of program allocates (tensors made, kept, freed, per step), never how an
allocator places them. It writes through `Recorder`, which rounds sizes as PyTorch's caching allocator
does before it sees them, numbers allocations, keeps the step marks, and writes tidepool's trace CSV
(traces/README.md) and, beside it, the steps JSON that bench/calls_by_step.py reads:

    {"step_begins_at_line": [...], "warmup_steps": N, "family": ..., "seed": ..., "steps": ...,
     "live_at_step_begin": [...], "step_peak_live": [...]}

step_peak_live is the most live memory within each step (the first one's counting what was made
before it), so that memory that stays flat can be told from memory that follows a live peak.

A line number there is the count of operations (allocations, frees, empty_cache calls) written before
that step began. The warm-up is the first pass over every shape the program will use (its largest
batch, its longest sequence, its first optimizer step): a generator marks its end with
`warmup_done()`. After it, a program whose shapes only repeat needs no new memory.
"""
import gzip
import json

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "int64": 8, "int32": 4, "int8": 1, "bool": 1, "fp8": 1}


def round_size(nbytes):
    """As PyTorch's CUDACachingAllocator rounds a request before it looks for a block: at least 512
    bytes, and a multiple of 512."""
    if nbytes < 512:
        return 512
    return (nbytes + 511) // 512 * 512


def nbytes(shape, dtype="fp32"):
    """The bytes of a dense tensor of this shape (an int or a sequence of ints) and dtype."""
    n = 1
    for d in (shape if isinstance(shape, (tuple, list)) else (shape,)):
        n *= int(d)
    return n * DTYPE_BYTES[dtype]


class Recorder:
    """A trace being written. alloc() returns a handle for free(); sizes are rounded here."""

    def __init__(self, path, family, seed):
        self.path, self.family, self.seed = path, family, seed
        self._f = gzip.open(path, "wt", compresslevel=1)
        self._f.write("op,id,size,stream\n")
        self._buf = []
        self._next_id = 1
        self._live = {}           # id -> (size, stream)
        self.live_bytes = 0
        self.peak_live_bytes = 0
        self.lines = 0
        self.step_begins = []
        self.live_at_step_begin = []
        self.step_peak_live = []
        self._step_peak = 0       # the most live since the current step began
        self.warmup_steps = None
        self.extra = {}           # fields a generator adds to the steps JSON (e.g. its phases)

    # ---- what the program does -------------------------------------------------------------------
    def alloc(self, size, stream=0):
        """A tensor of `size` bytes (before rounding) on `stream` (a small integer, 0 = default)."""
        if size <= 0:
            raise ValueError("an allocation of %r bytes" % (size,))
        size = round_size(int(size))
        ident = self._next_id
        self._next_id += 1
        self._live[ident] = (size, stream)
        self.live_bytes += size
        if self.live_bytes > self.peak_live_bytes:
            self.peak_live_bytes = self.live_bytes
        if self.live_bytes > self._step_peak:
            self._step_peak = self.live_bytes
        self._emit("a,%d,%d,%d\n" % (ident, size, stream))
        return ident

    def tensor(self, shape, dtype="fp32", stream=0):
        return self.alloc(nbytes(shape, dtype), stream)

    def free(self, ident):
        size, stream = self._live.pop(ident)
        self.live_bytes -= size
        self._emit("f,%d,%d,%d\n" % (ident, size, stream))

    def free_all(self, idents):
        for i in idents:
            self.free(i)

    def empty_cache(self):
        """torch.cuda.empty_cache()."""
        self._emit("e,0,0,0\n")

    def step(self):
        """A step of the program's loop begins here."""
        if self.step_begins:  # what came before the first step counts in it
            self.step_peak_live.append(self._step_peak)
            self._step_peak = self.live_bytes
        self.step_begins.append(self.lines)
        self.live_at_step_begin.append(self.live_bytes)

    def warmup_done(self):
        """Every shape the program will use has now been seen once: the steps begun so far (this one
        included, if one has begun and not ended) are the warm-up."""
        if self.warmup_steps is None:
            self.warmup_steps = len(self.step_begins)

    def size_of(self, ident):
        return self._live[ident][0]

    # ---- writing ----------------------------------------------------------------------------------
    def _emit(self, line):
        self._buf.append(line)
        self.lines += 1
        if len(self._buf) >= 65536:
            self._f.write("".join(self._buf))
            self._buf.clear()

    def close(self, extra=None):
        """Writes what is buffered and the steps JSON beside the trace (its name, .json for .csv.gz).
        Allocations still live stay live: the trace ends with them held, as a recording does."""
        self._f.write("".join(self._buf))
        self._buf.clear()
        self._f.close()
        if self.step_begins:
            self.step_peak_live.append(self._step_peak)
        if self.warmup_steps is None:
            raise RuntimeError("%s: the generator never called warmup_done()" % self.family)
        steps = {
            "step_begins_at_line": self.step_begins,
            "warmup_steps": self.warmup_steps,
            "family": self.family,
            "seed": self.seed,
            "steps": len(self.step_begins),
            "live_at_step_begin": self.live_at_step_begin,
            "step_peak_live": self.step_peak_live,
            "peak_live_bytes": self.peak_live_bytes,
        }
        steps.update(self.extra)
        if extra:
            steps.update(extra)
        with open(steps_path(self.path), "w") as f:
            json.dump(steps, f)
        return steps


def steps_path(trace_path):
    """The steps JSON that lies beside a trace."""
    for ext in (".csv.gz", ".csv"):
        if trace_path.endswith(ext):
            return trace_path[: -len(ext)] + ".json"
    return trace_path + ".json"
