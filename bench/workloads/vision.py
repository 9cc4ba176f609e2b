"""Image classification training with multi-scale variable batches, modelled on torchvision's
classification reference (references/classification/train.py) training torchvision.models.resnet18,
fed as CVNets' variable-batch sampler and timm's CUDA prefetcher feed it.

The model is ResNet-18 (conv 7x7/2, max-pool, four stages of two BasicBlocks at 64/128/256/512
channels, a 1x1/2 conv + BN downsample on the first block of stages 2-4, global average pool,
fc 512->1000), each conv + BatchNorm (+ ReLU) kept as one unit. Parameters in fp32 (11.7 M): each
unit's conv weight, its BN weight and bias as one tensor, and fc's: 41 tensors (torchvision's has 62).

Data (the side stream, stream 1): as timm's PrefetchLoader and Apex's ImageNet example do, batch k+1
is copied to the device on a side stream while batch k computes: the uint8 images [B,3,H,W], the
int64 targets, then the images converted to fp32 and normalized (the uint8 copy dropped). The
loop's variable holds batch k until the next iteration rebinds it, so at step k batch k+1 is made
and batch k-1 freed; the last batch of a pass is freed when the pass ends.

Batches: CVNets' VariableBatchSampler (ml-cvnets, data/sampler) with its defaults: five square
resolutions from np.linspace(160, 320, 5) made divisible by 32 (160, 192, 256, 288, 320), each with
the batch that keeps the pixels of the base batch (256 images at 256x256): 655, 455, 256, 202, 163;
each batch draws one at random. An epoch is one rank's share of ImageNet (1,281,167 images over 8
ranks) and ends with a partial batch.

A training step (torchvision's train_one_epoch with --amp):
* forward under fp16 autocast: the fp32 batch cast to fp16 for the stem conv; per unit the conv's
  fp16 weight cast (autocast's cache, saved by the conv), the conv output, the cuDNN workspace,
  the BN output (ReLU in place on it) and BN's save_mean/save_invstd; max-pool's output and its int64
  indices; the residual add and ReLU in place; average pool, fc (its weight cast saved), the fp16
  logits kept to the end of the step for the accuracy; cross-entropy with label smoothing 0.1 in
  fp32 (logits cast to fp32, log_softmax saved);
* `optimizer.zero_grad()` after the forward, before the backward, as the reference does: the
  previous step's gradients are live through this forward (set_to_none frees them here);
* `scaler.scale(loss).backward()`: each saved tensor freed as its node's backward ends, in reverse;
  per unit ReLU's threshold_backward, BN's grad input and its fp32 weight/bias gradients, the conv's
  grad input and workspaces, its weight gradient in fp16 cast to the fp32 `.grad`; gradient
  accumulation at a residual in place into the first gradient to arrive;
* GradScaler: scale and growth tracker made once, per step inv_scale and found_inf for `unscale_`,
  freed after `update()`; SGD (momentum 0.9, weight decay 1e-4, foreach): `_foreach_add(grads, params)`
  temporaries for the weight decay, momentum buffers cloned at the first step and kept;
* `utils.accuracy(output, target, topk=(1, 5))`: topk values and indices, the comparison, sums.

cuDNN (`torch.backends.cudnn.benchmark = True`, as the reference sets it): the first call of a conv
at a new shape (per direction: forward, backward data, backward filter) benchmarks algorithms in a
workspace as large as the largest candidate needs; later calls run the chosen algorithm in its own
workspace, or none. Sizes are drawn once per shape: none for 30% of shapes, else 1/4 to 4 times the
output's bytes (an assumption, of the order seen in recorded ResNet traces); the benchmark's at least
that and 2 to 8 times the output's; neither above 2 GiB.

Eval (torchvision's evaluate, after each epoch): fp32 (the reference evaluates without autocast)
under inference_mode, at 224x224 in batches of 512 (one rank's 6,250 validation images: 12 full
batches and one of 106): every activation freed once its consumer ran, max-pool's indices made and
dropped, the residual's identity kept to the add; cross-entropy, topk; the metric logger's
all-reduce of its meters at the end of each pass.

Warm-up: the run starts with a check of the eval path (two validation batches, as PyTorch
Lightning's sanity check does), then the first epoch's first five batches take each resolution in
turn, largest first; every later shape is one of those or a smaller partial batch.
"""
import math

FAMILY = "vision"
DESCRIPTION = ("ResNet-18 ImageNet training (torchvision reference: fp16 AMP + GradScaler, SGD momentum) with "
               "CVNets' multi-scale variable batches, a prefetch copy stream, cuDNN workspaces, fp32 eval per epoch")
DEFAULT_STEPS = 5000

DATA_STREAM = 1
CLASSES = 1000
BASE_CROP, BASE_BATCH = 256, 256
MIN_CROP, MAX_CROP, SCALES = 160, 320, 5
EPOCH_IMAGES = 1281167 // 8           # one rank's share of ImageNet's training set
EVAL_IMAGES, EVAL_BATCH, EVAL_RES = 50000 // 8, 512, 224
SANITY_EVAL_BATCHES = 2
WS_NONE, WS_MIN, WS_MAX = 0.3, 0.25, 4.0
BENCH_MIN, BENCH_MAX, WS_CAP = 2.0, 8.0, 2 << 30


def _make_divisible(v, d=32):
    new = max(d, int(v + d / 2) // d * d)
    if new < 0.9 * v:
        new += d
    return new


def _tuples():
    """CVNets' (resolution, batch) pairs: the batch keeps the pixels of the base batch."""
    out = []
    for i in range(SCALES):
        s = _make_divisible(MIN_CROP + (MAX_CROP - MIN_CROP) * i / (SCALES - 1))
        out.append((s, max(1, int(BASE_CROP * BASE_CROP / (s * s) * BASE_BATCH))))
    return out


def _units():
    """ResNet-18's conv + BN units: (name, c_in, c_out, kernel, stride), and its blocks as
    (u1, u2, downsample or None) indices into the units."""
    units = [("stem", 3, 64, 7, 2)]
    blocks = []
    cin = 64
    for stage, c in enumerate((64, 128, 256, 512)):
        for b in range(2):
            stride = 2 if stage > 0 and b == 0 else 1
            u1 = len(units)
            units.append(("l%d.%d.conv1" % (stage + 1, b), cin, c, 3, stride))
            units.append(("l%d.%d.conv2" % (stage + 1, b), c, c, 3, 1))
            ds = None
            if stride != 1 or cin != c:
                ds = len(units)
                units.append(("l%d.%d.downsample" % (stage + 1, b), cin, c, 1, stride))
            blocks.append((u1, u1 + 1, ds))
            cin = c
    return units, blocks


class _Net:
    def __init__(self, rec, rng):
        self.rec, self.rng = rec, rng
        self.units, self.blocks = _units()
        t = rec.tensor
        # parameters, in the model's order: each unit's conv weight and its BN weight + bias, then fc
        self.w_shape = [(co, ci, k, k) for _, ci, co, k, _ in self.units]
        self.params = []
        for (_, ci, co, k, _), ws in zip(self.units, self.w_shape):
            self.params.append(t(ws, "fp32"))
            self.params.append(t(2 * co, "fp32"))
        self.params.append(t(CLASSES * 512 + CLASSES, "fp32"))
        self.p_bytes = [rec.size_of(p) for p in self.params]
        self.bn_running = [t(2 * co, "fp32") for _, _, co, _, _ in self.units]   # running mean, var (buffers)
        self.grads = None
        self.momentum = None
        self.scale = None
        self.ws = {}

    # ---- cuDNN ----
    def _workspace(self, key, out_bytes):
        rec, rng = self.rec, self.rng
        w = self.ws.get(key)
        if w is None:
            w = 0 if rng.random() < WS_NONE else min(WS_CAP, int(out_bytes * math.exp(
                rng.uniform(math.log(WS_MIN), math.log(WS_MAX)))))
            bench = max(w, min(WS_CAP, int(out_bytes * rng.uniform(BENCH_MIN, BENCH_MAX))))
            rec.free(rec.alloc(bench))                          # the largest candidate's, for the search
            self.ws[key] = w
        if w:
            rec.free(rec.alloc(w))

    # ---- training (fp16 autocast) ----
    def _unit_fwd(self, u, B, x_hw, dt="fp16"):
        """A conv + BN unit in training; returns what its backward needs."""
        rec, t = self.rec, self.rec.tensor
        _, ci, co, k, s = self.units[u]
        h = x_hw // s
        sv = {"hw": h, "in_hw": x_hw}
        sv["w"] = t(self.w_shape[u], dt)                       # autocast's cast of the weight
        sv["out"] = t((B, co, h, h), dt)
        self._workspace((u, "fwd", B, x_hw, dt), rec.size_of(sv["out"]))
        sv["bn"] = t((B, co, h, h), dt)
        sv["stats"] = t(2 * co, "fp32")                         # save_mean, save_invstd
        return sv

    def _bn_bwd(self, u, B, sv, g):
        """BN's backward on g; returns its grad input. Frees what BN saved."""
        rec, t = self.rec, self.rec.tensor
        co, h = self.units[u][2], sv["hw"]
        d = t((B, co, h, h), "fp16")
        self._grad(2 * u + 1, t(2 * co, "fp32"))                # grad weight and bias, stolen into .grad
        rec.free(sv["out"])
        rec.free(sv["stats"])
        return d

    def _conv_bwd(self, u, B, sv, d, need_input_grad=True):
        rec, t = self.rec, self.rec.tensor
        _, ci, co, k, s = self.units[u]
        x_hw = sv["in_hw"]
        dx = None
        if need_input_grad:
            dx = t((B, ci, x_hw, x_hw), "fp16")
            self._workspace((u, "bwd_data", B, x_hw, "fp16"), rec.size_of(dx))
        dw16 = t(self.w_shape[u], "fp16")
        self._workspace((u, "bwd_filter", B, x_hw, "fp16"), rec.size_of(d))
        self._grad(2 * u, t(self.w_shape[u], "fp32"))           # the cast's backward: fp32 .grad
        rec.free(dw16)
        rec.free(sv["w"])
        rec.free(d)
        return dx

    def _grad(self, p, ident):
        if self.grads is None:
            self.grads = {}
        self.grads[p] = ident

    def _relu_bwd(self, u, B, sv, g):
        d = self.rec.tensor((B, self.units[u][2], sv["hw"], sv["hw"]), "fp16")
        self.rec.free(g)
        self.rec.free(sv["bn"])                                 # ReLU's saved output, its last user done
        return d

    def train_step(self, x, target, B, H):
        rec, t, free = self.rec, self.rec.tensor, self.rec.free
        # ---- forward ----
        xin = t((B, 3, H, H), "fp16")                           # autocast casts the fp32 batch
        stem = self._unit_fwd(0, B, H)
        p = H // 4
        mp = t((B, 64, p, p), "fp16")
        mpi = t((B, 64, p, p), "int64")                         # max_pool2d_with_indices
        saved = []
        x_hw, first_in = p, mp
        for u1, u2, ds in self.blocks:
            a = self._unit_fwd(u1, B, x_hw)
            b = self._unit_fwd(u2, B, a["hw"])
            d = None
            if ds is not None:
                d = self._unit_fwd(ds, B, x_hw)
                free(d.pop("bn"))                               # added into b["bn"], which add saves not
            saved.append((u1, u2, ds, a, b, d))                 # out += identity; relu_(): in place on b["bn"]
            x_hw = b["hw"]
        avg = t((B, 512), "fp16")
        fcw = t(CLASSES * 512 + CLASSES, "fp16")
        logits = t((B, CLASSES), "fp16")                        # `output`, kept for the accuracy
        l32 = t((B, CLASSES), "fp32")
        lsm = t((B, CLASSES), "fp32")                           # log_softmax, saved
        free(l32)
        smooth = t(B, "fp32")                                   # label smoothing's -lsm.sum(-1)
        loss = t(1, "fp32")
        free(smooth)
        # ---- zero_grad(set_to_none=True) between the forward and the backward ----
        if self.grads:
            rec.free_all(self.grads.values())
        self.grads = None
        # ---- scaler.scale(loss).backward() ----
        if self.scale is None:
            self.scale = t(1, "fp32")
            self.growth = t(1, "int32")
        scaled = t(1, "fp32")
        seed = t(1, "fp32")
        dlsm = t((B, CLASSES), "fp32")
        free(seed)
        dl32 = t((B, CLASSES), "fp32")
        free(dlsm)
        free(lsm)
        dl16 = t((B, CLASSES), "fp16")
        free(dl32)
        davg = t((B, 512), "fp16")
        dfc16 = t(CLASSES * 512 + CLASSES, "fp16")
        self._grad(len(self.params) - 1, t(CLASSES * 512 + CLASSES, "fp32"))
        free(dfc16)
        free(fcw)
        free(dl16)
        free(avg)
        g = t((B, 512, x_hw, x_hw), "fp16")                     # average pool's backward
        free(davg)
        for u1, u2, ds, a, b, d in reversed(saved):
            g2 = self._relu_bwd(u2, B, b, g)
            gid = None
            if ds is not None:                                  # made last in the forward, first back
                dd = self._bn_bwd(ds, B, d, g2)
                gid = self._conv_bwd(ds, B, d, dd)
            db = self._bn_bwd(u2, B, b, g2)
            dxa = self._conv_bwd(u2, B, b, db)
            if gid is None:
                gid = g2                                        # the identity's gradient
            else:
                free(g2)
            ra = self._relu_bwd(u1, B, a, dxa)
            da = self._bn_bwd(u1, B, a, ra)
            free(ra)
            dx = self._conv_bwd(u1, B, a, da)
            free(dx)                                            # accumulated in place into gid
            g = gid
        free(first_in)                                          # max-pool's output: its last user done
        gm = t((B, 64, H // 2, H // 2), "fp16")                 # max-pool's backward
        free(g)
        free(mpi)
        rs = self._relu_bwd(0, B, stem, gm)
        ds_ = self._bn_bwd(0, B, stem, rs)
        free(rs)
        self._conv_bwd(0, B, stem, ds_, need_input_grad=False)
        free(xin)
        # ---- scaler.step(optimizer); scaler.update() ----
        dbl = t(1, "fp32")                                      # _scale.double().reciprocal().float()
        inv = t(1, "fp32")
        free(dbl)
        found = t(1, "fp32")
        self._sgd_step()
        free(found)
        free(inv)
        # ---- utils.accuracy(output, target, topk=(1, 5)) ----
        vals = t((B, 5), "fp16")
        idx = t((B, 5), "int64")
        free(vals)
        correct = t((5, B), "bool")
        sums = [t(1, "fp32") for _ in range(2)]
        rec.free_all(sums)
        free(correct)
        free(idx)
        free(logits)
        free(scaled)
        free(loss)

    def _sgd_step(self):
        rec = self.rec
        order = range(len(self.params))
        wd = [rec.alloc(self.p_bytes[i]) for i in order]        # _foreach_add(grads, params, alpha=wd)
        if self.momentum is None:
            self.momentum = [rec.alloc(self.p_bytes[i]) for i in order]   # clone(grad).detach()
        rec.free_all(wd)                                        # device_grads rebound to the buffers

    # ---- eval (fp32, inference_mode) ----
    def _unit_eval(self, u, B, x_hw):
        rec, t = self.rec, self.rec.tensor
        co, s = self.units[u][2], self.units[u][4]
        h = x_hw // s
        c = t((B, co, h, h), "fp32")
        self._workspace((u, "fwd", B, x_hw, "fp32"), rec.size_of(c))
        y = t((B, co, h, h), "fp32")
        rec.free(c)
        return y, h

    def eval_step(self, x, target, B, H):
        rec, t, free = self.rec, self.rec.tensor, self.rec.free
        y, h = self._unit_eval(0, B, H)
        p = h // 2
        mp = t((B, 64, p, p), "fp32")
        mpi = t((B, 64, p, p), "int64")
        free(mpi)
        free(y)
        x_, hw = mp, p
        for u1, u2, ds in self.blocks:
            a, ha = self._unit_eval(u1, B, hw)
            b, hb = self._unit_eval(u2, B, ha)
            free(a)
            if ds is not None:
                idn, _ = self._unit_eval(ds, B, hw)
                free(idn)                                       # added into b in place
            free(x_)
            x_, hw = b, hb
        avg = t((B, 512), "fp32")
        free(x_)
        out = t((B, CLASSES), "fp32")
        free(avg)
        lsm = t((B, CLASSES), "fp32")
        loss = t(1, "fp32")
        free(lsm)
        vals = t((B, 5), "fp32")
        idx = t((B, 5), "int64")
        free(vals)
        correct = t((5, B), "bool")
        sums = [t(1, "fp32") for _ in range(2)]
        rec.free_all(sums)
        free(correct)
        free(idx)
        free(out)
        free(loss)


def _pass(rec, net, batches, train, left, warm_after=None):
    """One pass of a loader through the prefetcher; returns the steps it ran. warm_after: the
    warm-up ends after that many of its steps."""
    def copy(res, B):
        u8 = rec.tensor((B, 3, res, res), "int8", DATA_STREAM)  # uint8 images
        tg = rec.tensor(B, "int64", DATA_STREAM)
        x = rec.tensor((B, 3, res, res), "fp32", DATA_STREAM)   # .float().sub_(mean).div_(std)
        rec.free(u8)
        return x, tg

    n = min(len(batches), left)
    held = {}
    for j in range(n):
        rec.step()
        if j == 0:
            held[0] = copy(*batches[0])
        if j + 1 < len(batches):
            held[j + 1] = copy(*batches[j + 1])
        if j >= 1:
            rec.free_all(held.pop(j - 1))
        res, B = batches[j]
        x, tg = held[j]
        (net.train_step if train else net.eval_step)(x, tg, B, res)
        if warm_after is not None and j + 1 == warm_after:
            rec.warmup_done()
    if n == len(batches):
        for k in sorted(held):                                  # the pass ends: its last batch dropped
            rec.free_all(held.pop(k))
        sync = [rec.tensor(2, "fp32") for _ in range(5 if train else 3)]   # meters' all_reduce
        rec.free_all(sync)
    return n


def _epoch_batches(rng, tuples, first):
    out, left = [], EPOCH_IMAGES
    if first:
        for res, B in sorted(tuples, reverse=True):
            out.append((res, B))
            left -= B
    while left > 0:
        res, B = rng.choice(tuples)
        out.append((res, min(B, left)))
        left -= B
    return out


def _eval_batches(count=None):
    full, rest = divmod(EVAL_IMAGES, EVAL_BATCH)
    out = [(EVAL_RES, EVAL_BATCH)] * full + ([(EVAL_RES, rest)] if rest else [])
    return out if count is None else out[:count]


def generate(rec, rng, steps):
    net = _Net(rec, rng)
    _mean_std = [rec.tensor((1, 3, 1, 1), "fp32") for _ in range(2)]   # the prefetcher's constants
    tuples = _tuples()
    phases = []
    rec.extra["phases"] = phases
    done = 0
    phases.append([done, "eval"])
    done += _pass(rec, net, _eval_batches(SANITY_EVAL_BATCHES), False, steps - done)
    first = True
    while done < steps:
        batches = _epoch_batches(rng, tuples, first)
        phases.append([done, "train"])
        done += _pass(rec, net, batches, True, steps - done, SCALES if first else None)
        first = False
        if done < steps:
            phases.append([done, "eval"])
            done += _pass(rec, net, _eval_batches(), False, steps - done)
    rec.warmup_done()
