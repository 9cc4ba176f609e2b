"""Dense LLM training with a sequence-length curriculum, modelled on a Hugging Face Trainer-style
loop: LlamaForCausalLM, fp32 parameters under bf16 autocast, gradient checkpointing, gradient
accumulation, torch.optim.AdamW (foreach), periodic checkpoint saves and periodic
`torch.cuda.empty_cache()`.

The model is Llama-2-7B-wide (hidden 4096, 32 heads of 128, 8 key/value heads, SwiGLU FFN 11008,
vocabulary 32000, untied embeddings), modelled coarsely as LAYERS layers with fused qkv and gate/up
tensors. One step of the trace is one micro-batch.

Curriculum: the sequence length grows in stages (512, 1024, 2048, 4096, 8192) while the tokens per
optimizer step stay constant: the micro-batch shrinks as the length grows (24, 12, 6, 3, 1
sequences: 12288 tokens per micro-batch, 8192 at the last stage, which takes 6 micro-batches per
optimizer step instead of 4). Sequences are padded to the stage's length, so transformers'
`_update_causal_mask` builds the 4-D additive mask `[batch, 1, seq, seq]` in the embeddings' dtype
(fp32 here) for SDPA at every forward: the one tensor whose size follows seq^2.

Per micro-batch:
* forward with `gradient_checkpointing_enable()`: each layer runs without keeping its activations
  (norm, fused qkv, rotary q/k, attention, o_proj, residual, norm, gate/up, SiLU*up, down,
  residual: each temporary freed at once); only each layer's input (the fp32 residual stream)
  is kept. Autocast caches each weight's bf16 cast until the forward ends;
* the head: final norm, lm_head in bf16, `logits.float()` (fp32 [tokens, 32000]), cross-entropy
  (log_softmax saved); the fp32 logits dropped with the model's outputs;
* backward: cross-entropy's and lm_head's gradients, then per layer from the last: the layer
  recomputed (its activations and weight casts kept this time), its backward, each weight gradient
  in bf16 cast to fp32 (stolen into `.grad` at the first micro-batch after zero_grad, added in place
  and freed at the others);
* every ACCUM micro-batches: `clip_grad_norm_` (foreach norms), AdamW (`_multi_tensor_adamw`:
  exp_avg and exp_avg_sq made per parameter at the first step and kept, a parameter-sized list of
  `_foreach_sqrt` temporaries freed at the end), `zero_grad(set_to_none=True)`;
* every SAVE_EVERY optimizer steps a checkpoint: the state dict converted to bf16 on a side stream
  (stream 1, copies staged for the host write), freed once written, then `empty_cache()`;
  every EMPTY_EVERY optimizer steps `torch.cuda.empty_cache()`, as many training scripts do.

Warm-up: the run starts with a probe step, as scripts do that fail fast if the longest stage does
not fit: one optimizer step whose micro-batches take each stage's shape in turn, longest first.
Every later shape is one of those.
"""
from .common import nbytes

FAMILY = "llm_curriculum"
DESCRIPTION = ("dense LLM training (Llama-2-7B-wide, coarse layers) with a sequence-length curriculum 512->8192 "
               "at ~constant tokens, grad checkpointing and accumulation, fp32 logits + CE, AdamW, "
               "periodic save and empty_cache")
DEFAULT_STEPS = 5000

LAYERS = 6
HIDDEN = 4096
HEADS = 32
HEAD_DIM = 128
KV_HEADS = 8
FFN = 11008
VOCAB = 32000
QKV = HIDDEN + 2 * KV_HEADS * HEAD_DIM

# (sequence length, micro-batch, micro-batches per optimizer step, share of the run)
STAGES = ((512, 24, 4, 0.15), (1024, 12, 4, 0.15), (2048, 6, 4, 0.20), (4096, 3, 4, 0.25), (8192, 1, 6, 0.25))
SAVE_EVERY = 150
EMPTY_EVERY = 50
SAVE_STREAM = 1


class _Params:
    """fp32 parameters, their gradients (made in the backward, set to None by zero_grad) and the
    AdamW state (made at the first step, kept)."""

    def __init__(self, rec):
        self.rec = rec
        self.shapes, self.ids = [], []
        self.grads = {}
        self.state = None

    def add(self, shape):
        self.shapes.append(shape)
        self.ids.append(self.rec.tensor(shape, "fp32"))
        return len(self.ids) - 1

    def grad(self, p):
        g = self.rec.tensor(self.shapes[p], "fp32")
        if p in self.grads:
            self.rec.free(g)                   # added in place into .grad
        else:
            self.grads[p] = g                  # AccumulateGrad steals it

    def cast_grad(self, p):
        gb = self.rec.tensor(self.shapes[p], "bf16")
        self.grad(p)
        self.rec.free(gb)

    def cast(self, p):
        return self.rec.tensor(self.shapes[p], "bf16")

    def optimizer_step(self):
        rec = self.rec
        order = sorted(self.grads)
        norms = [rec.tensor(1, "fp32") for _ in order]          # clip_grad_norm_: _foreach_norm
        total = rec.tensor(len(order), "fp32")
        rec.free_all(norms)
        tn = rec.tensor(1, "fp32")
        rec.free(total)
        coef = rec.tensor(1, "fp32")
        rec.free(tn)
        rec.free(coef)
        if self.state is None:
            self.state = [(rec.tensor(self.shapes[p], "fp32"), rec.tensor(self.shapes[p], "fp32"))
                          for p in order]
        sq = [rec.tensor(self.shapes[p], "fp32") for p in order]  # _foreach_sqrt(exp_avg_sqs)
        rec.free_all(sq)
        for p in order:
            rec.free(self.grads[p])
        self.grads = {}


def _layer_forward(rec, P, pr, T, keep):
    """One decoder layer over T tokens; returns (output, saved) where saved is what the backward
    needs when keep (the recompute), else only the weight casts (kept by autocast's cache)."""
    t, free = rec.tensor, rec.free
    H = HIDDEN
    s = {}
    n = t((T, H), "fp32")
    s["n1b"] = t((T, H), "bf16")
    free(n)
    s["wqkv"] = P.cast(pr["qkv"])
    s["qkv"] = t((T, QKV), "bf16")
    s["rot"] = t((T, H + KV_HEADS * HEAD_DIM), "bf16")          # rotary q and k
    s["attn"] = t((T, H), "bf16")
    s["wo"] = P.cast(pr["o"])
    o = t((T, H), "bf16")
    if not keep:
        for k in ("n1b", "qkv", "rot"):
            free(s.pop(k))
    s["x1"] = t((T, H), "fp32")
    free(o)
    if not keep:
        free(s.pop("attn"))
    n = t((T, H), "fp32")
    s["n2b"] = t((T, H), "bf16")
    free(n)
    s["wgu"] = P.cast(pr["gu"])
    s["gu"] = t((T, 2 * FFN), "bf16")
    if not keep:
        free(s.pop("n2b"))
    s["act"] = t((T, FFN), "bf16")
    if not keep:
        free(s.pop("gu"))
    s["wd"] = P.cast(pr["down"])
    d = t((T, H), "bf16")
    if not keep:
        free(s.pop("act"))
    out = t((T, H), "fp32")
    free(d)
    if not keep:
        free(s.pop("x1"))
    return out, s


def _layer_backward(rec, P, pr, T, s, g):
    t, free = rec.tensor, rec.free
    H = HIDDEN
    dd = t((T, H), "bf16")
    P.cast_grad(pr["down"])
    dact = t((T, FFN), "bf16")
    free(dd)
    free(s["act"])
    free(s["wd"])
    dgu = t((T, 2 * FFN), "bf16")                               # SiLU * up backward
    free(dact)
    free(s["gu"])
    P.cast_grad(pr["gu"])
    dn2b = t((T, H), "bf16")
    free(dgu)
    free(s["wgu"])
    free(s["n2b"])
    dn2 = t((T, H), "fp32")
    free(dn2b)
    dx1 = t((T, H), "fp32")                                     # RMSNorm backward + residual
    P.grad(pr["ln2"])
    free(dn2)
    free(g)
    do = t((T, H), "bf16")
    P.cast_grad(pr["o"])
    dattn = t((T, H), "bf16")
    free(do)
    free(s["wo"])
    free(s["attn"])
    dqkv = t((T, QKV), "bf16")                                  # SDPA + rotary backward
    free(dattn)
    free(s["rot"])
    free(s["qkv"])
    P.cast_grad(pr["qkv"])
    dn1b = t((T, H), "bf16")
    free(dqkv)
    free(s["wqkv"])
    free(s["n1b"])
    dn1 = t((T, H), "fp32")
    free(dn1b)
    dx = t((T, H), "fp32")
    P.grad(pr["ln1"])
    free(dn1)
    free(dx1)
    free(s["x1"])
    return dx


def _micro_batch(rec, P, lp, seq, mb):
    t, free = rec.tensor, rec.free
    T, H = seq * mb, HIDDEN
    ids = t((mb, seq), "int64")
    labels = t((mb, seq), "int64")
    am = t((mb, seq), "int64")                                  # the collator's attention_mask
    pos = t((mb, seq), "int64")
    full = t((seq, seq), "fp32")                                # _update_causal_mask
    mask = t((mb, 1, seq, seq), "fp32")
    free(full)
    cos = t((mb, seq, HEAD_DIM), "fp32")
    sin = t((mb, seq, HEAD_DIM), "fp32")
    x = t((T, H), "fp32")                                       # embed_tokens
    inputs = []
    casts = []
    for layer in range(LAYERS):                                 # checkpointed: only inputs kept
        inputs.append(x)
        x, s = _layer_forward(rec, P, lp[layer], T, keep=False)
        casts += s.values()
    inputs.append(x)
    nf = t((T, H), "fp32")
    nfb = t((T, H), "bf16")
    free(nf)
    wlm = P.cast(lp["lm_head"])
    lg = t((T, VOCAB), "bf16")
    lg32 = t((T, VOCAB), "fp32")
    free(lg)
    lsm = t((T, VOCAB), "fp32")                                 # cross_entropy's log_softmax
    loss = t(1, "fp32")
    free(lg32)
    rec.free_all(casts)                                         # autocast exits: its cache cleared
    # ---- backward ----
    free(loss)
    dl = t((T, VOCAB), "fp32")
    free(lsm)
    dlb = t((T, VOCAB), "bf16")
    free(dl)
    dnfb = t((T, H), "bf16")
    P.cast_grad(lp["lm_head"])
    free(dlb)
    free(wlm)
    free(nfb)
    dnf = t((T, H), "fp32")
    free(dnfb)
    g = t((T, H), "fp32")
    P.grad(lp["norm"])
    free(dnf)
    free(inputs.pop())
    for layer in reversed(range(LAYERS)):
        _, s = _layer_forward(rec, P, lp[layer], T, keep=True)  # recompute
        free(_)
        g = _layer_backward(rec, P, lp[layer], T, s, g)
        free(inputs.pop())
    P.grad(lp["embed"])
    free(g)
    for i in (ids, labels, am, pos, mask, cos, sin):
        free(i)


def _save_checkpoint(rec, P):
    staged = [rec.alloc(nbytes(shape, "bf16"), SAVE_STREAM) for shape in P.shapes]
    rec.free_all(staged)                                        # written to the host, dropped
    rec.empty_cache()


def generate(rec, rng, steps):
    P = _Params(rec)
    lp = {"embed": P.add((VOCAB, HIDDEN))}
    for layer in range(LAYERS):
        lp[layer] = {"ln1": P.add(HIDDEN), "qkv": P.add((QKV, HIDDEN)), "o": P.add((HIDDEN, HIDDEN)),
                     "ln2": P.add(HIDDEN), "gu": P.add((2 * FFN, HIDDEN)), "down": P.add((HIDDEN, FFN))}
    lp["norm"] = P.add(HIDDEN)
    lp["lm_head"] = P.add((VOCAB, HIDDEN))

    # the probe step: each stage's shape once, longest first, then the first optimizer step
    step = 0
    for seq, mb, _, _ in reversed(STAGES):
        if step == steps:
            break
        rec.step()
        _micro_batch(rec, P, lp, seq, mb)
        step += 1
    P.optimizer_step()
    rec.warmup_done()

    bounds, acc = [], 0.0
    for st in STAGES:
        acc += st[3]
        bounds.append(acc)
    opt_steps = 1
    while step < steps:
        frac = step / steps
        stage = next(i for i, b in enumerate(bounds) if frac < b or i == len(bounds) - 1)
        seq, mb, accum, _ = STAGES[stage]
        for _ in range(accum):
            if step == steps:
                break
            rec.step()
            _micro_batch(rec, P, lp, seq, mb)
            step += 1
        else:
            P.optimizer_step()
            opt_steps += 1
            if opt_steps % SAVE_EVERY == 0:
                _save_checkpoint(rec, P)
            elif opt_steps % EMPTY_EVERY == 0:
                rec.empty_cache()
