"""Mixture-of-experts training, one rank of expert parallelism, modelled on Megatron-LM's MoE layer
with the all-to-all token dispatcher and plain PyTorch training around it.

The model: a decoder with MoE FFNs (hidden 2048, 16 heads of 128, 32 experts of SwiGLU FFN 5632,
top-2 routing, vocabulary 50304, untied embeddings), modelled coarsely as LAYERS layers. Expert
parallelism over EP=8 ranks, so this rank holds 4 experts per layer; the trace is this rank's.
Training as a plain PyTorch loop does it: fp32 parameters (they are the master weights), bf16
autocast, torch.optim.AdamW (foreach), gradient accumulation over ACCUM micro-batches of
MICRO_TOKENS tokens, `zero_grad(set_to_none=True)`. One step of the trace is one micro-batch.

Per micro-batch and layer, forward (Megatron `MoEAlltoAllTokenDispatcher` and `SequentialMLP`):
RMSNorm, fused qkv, flash attention (output and logsumexp saved), o_proj, residual in fp32; the
router in fp32 (logits, softmax probs, top-k values and indices, routing map), the per-expert
token counts and their all-gather (`preprocess`), `permute` into a send buffer whose rows follow the
counts, the all-to-all into a receive buffer, `sort_chunks_by_idxs` by local expert, each local
expert's fc1 / SwiGLU / fc2 on its chunk, `torch.cat` of the outputs, the inverse sort, the
all-to-all back, `unpermute` weighted by the probs, the residual add. The all-to-all receive
buffers are allocated on the communication stream (stream 1), as overlapped dispatchers do; the
rest on the default stream. Each weight is cast to bf16 by autocast at its first use and the cast is
kept for the backward. The head: final norm, lm_head, bf16 logits, `.float()`, cross-entropy
(log_softmax saved).

The backward runs in reverse with the gradients of each of those tensors; each weight's gradient is
computed in bf16 and cast to fp32: at the first micro-batch after `zero_grad` it becomes `.grad`
(AccumulateGrad steals it), at the others it is added in place and freed. Every ACCUM micro-batches:
`clip_grad_norm_` (foreach norms), AdamW (`_multi_tensor_adamw`: exp_avg / exp_avg_sq made per
parameter at the first step and kept; `torch._foreach_sqrt(exp_avg_sqs)` makes a parameter-sized
list of temporaries, freed at the end), then `zero_grad` frees every gradient.

Token counts: per layer, the router's preference over the 32 experts is a slowly drifting
imbalanced distribution (log-probabilities that random-walk and are pulled back towards balance, as
the load-balancing loss does); each micro-batch draws this rank's per-expert counts around it, and
the counts every EP rank sends to this rank's 4 experts. A capacity factor of 1.25 (Megatron's
`--moe-expert-capacity-factor` with token dropping) bounds what an expert takes from each rank, so
every buffer is bounded. The first micro-batch is arranged at those bounds (every token kept, each
local expert receiving its full capacity from every rank); the warm-up is the first accumulation
cycle, through the first optimizer step.
"""
import math

FAMILY = "moe_training"
DESCRIPTION = ("MoE training, one expert-parallel rank (32 experts top-2, EP 8, Megatron all-to-all dispatcher): "
               "count-sized permute / all-to-all (comm stream) / per-expert FFN buffers, fp32 AdamW, grad accumulation")
DEFAULT_STEPS = 5000

LAYERS = 3
HIDDEN = 2048
HEADS = 16
EXPERTS = 32
EP = 8
LOCAL = EXPERTS // EP
TOPK = 2
FFN = 5632
VOCAB = 50304
MICRO_TOKENS = 4096           # 2 sequences of 2048
ACCUM = 4
CAPACITY_FACTOR = 1.25
CAP = int(math.ceil(CAPACITY_FACTOR * MICRO_TOKENS * TOPK / EXPERTS))   # per expert, per source rank
COMM = 1                      # the all-to-all stream


class _Params:
    """fp32 parameters, their gradients (made in the backward, set to None by zero_grad) and the
    AdamW state (made at the first step, kept)."""

    def __init__(self, rec):
        self.rec = rec
        self.shapes = []
        self.ids = []
        self.grads = {}
        self.state = None
        self.first_micro = True

    def add(self, shape):
        self.shapes.append(shape)
        self.ids.append(self.rec.tensor(shape, "fp32"))
        return len(self.ids) - 1

    def grad(self, p):
        """The backward reaching parameter p with its bf16 gradient already cast to fp32."""
        rec = self.rec
        g = rec.tensor(self.shapes[p], "fp32")
        if p in self.grads:
            rec.free(g)                        # accumulated in place into .grad
        else:
            self.grads[p] = g

    def cast_grad(self, p):
        """The gradient of the bf16 autocast copy, cast back to fp32."""
        gb = self.rec.tensor(self.shapes[p], "bf16")
        self.grad(p)
        self.rec.free(gb)

    def optimizer_step(self):
        rec = self.rec
        order = sorted(self.grads)
        norms = [rec.tensor(1, "fp32") for _ in order]          # clip_grad_norm_: _foreach_norm
        total = rec.tensor(len(order), "fp32")                  # torch.stack
        rec.free_all(norms)
        tn = rec.tensor(1, "fp32")
        rec.free(total)
        coef = rec.tensor(1, "fp32")
        rec.free(tn)
        rec.free(coef)                                          # _foreach_mul_ in place
        if self.state is None:                                  # _init_group
            self.state = [(rec.tensor(self.shapes[p], "fp32"), rec.tensor(self.shapes[p], "fp32"))
                          for p in order]
        sq = [rec.tensor(self.shapes[p], "fp32") for p in order]  # _foreach_sqrt(exp_avg_sqs)
        rec.free_all(sq)
        for p in order:                                          # zero_grad(set_to_none=True)
            rec.free(self.grads[p])
        self.grads = {}


class _Router:
    """The router's drifting preference over experts (log-probabilities), per layer."""

    def __init__(self, rng):
        self.rng = rng
        self.z = [[rng.gauss(0.0, 0.6) for _ in range(EXPERTS)] for _ in range(LAYERS)]

    def drift(self):
        g = self.rng.gauss
        for z in self.z:
            for e in range(EXPERTS):
                z[e] = 0.97 * z[e] + g(0.0, 0.08)

    def counts(self, layer):
        """(tokens this rank sends, [tokens each local expert receives]) for one micro-batch."""
        rng, z = self.rng, self.z[layer]
        m = max(z)
        w = [math.exp(v - m) for v in z]
        s = sum(w)
        assigned = MICRO_TOKENS * TOPK

        def draw(p):
            mean = assigned * p
            return min(CAP, max(0, int(round(mean + rng.gauss(0.0, 1.5 * math.sqrt(mean + 1.0))))))

        send = sum(draw(v / s) for v in w)
        send = min(send, assigned)
        recv = []
        for e in range(LOCAL):                  # this rank holds experts 0..LOCAL-1
            p = w[e] / s
            recv.append(sum(draw(p * rng.lognormvariate(0.0, 0.2)) for _ in range(EP)))
        return send, recv


def _forward(rec, P, lp, counts):
    """One micro-batch forward; returns what the backward frees, layer by layer."""
    t, free = rec.tensor, rec.free
    T, H = MICRO_TOKENS, HIDDEN
    ids = t(T, "int64")
    labels = t(T, "int64")
    x = t((T, H), "fp32")                                      # embedding
    saved = []
    for layer in range(LAYERS):
        pr = lp[layer]
        n_send, recv_counts = counts[layer]
        s = {"x": x}
        s["rstd1"] = t(T, "fp32")
        n1 = t((T, H), "fp32")
        s["n1b"] = t((T, H), "bf16")
        free(n1)
        s["wqkv"] = t(P.shapes[pr["qkv"]], "bf16")              # autocast cast, kept for the backward
        s["qkv"] = t((T, 3 * H), "bf16")
        s["attn"] = t((T, H), "bf16")
        s["lse"] = t((HEADS, T), "fp32")
        s["wo"] = t(P.shapes[pr["o"]], "bf16")
        o = t((T, H), "bf16")
        s["x1"] = t((T, H), "fp32")
        free(o)
        s["rstd2"] = t(T, "fp32")
        s["n2"] = t((T, H), "fp32")                             # saved: the fp32 router's input
        logits = t((T, EXPERTS), "fp32")
        s["probs"] = t((T, EXPERTS), "fp32")
        free(logits)
        s["topv"] = t((T, TOPK), "fp32")
        s["topi"] = t((T, TOPK), "int64")
        s["rmap"] = t((T, EXPERTS), "bool")
        tpe = t(EXPERTS, "int64")                               # preprocess: tokens per expert
        gathered = t((EP, EXPERTS), "int64")                    # ... all-gathered over the EP group
        free(tpe)
        free(gathered)                                          # copied to the host for the splits
        n2b = t((T, H), "bf16")
        send = t((n_send, H), "bf16")                           # permute
        s["sidx"] = t(n_send, "int64")
        free(n2b)
        n_recv = sum(recv_counts)
        recv = t((n_recv, H), "bf16", COMM)                     # all-to-all
        free(send)
        s["sorted"] = t((n_recv, H), "bf16")                    # sort_chunks_by_idxs
        free(recv)
        experts = []
        outs = []
        for e in range(LOCAL):
            r = recv_counts[e]
            ex = {}
            ex["w13"] = t(P.shapes[pr["w13"][e]], "bf16")
            ex["fc1"] = t((r, 2 * FFN), "bf16")
            ex["act"] = t((r, FFN), "bf16")
            ex["w2"] = t(P.shapes[pr["w2"][e]], "bf16")
            outs.append(t((r, H), "bf16"))
            experts.append(ex)
        s["experts"] = experts
        cat = t((n_recv, H), "bf16")
        rec.free_all(outs)
        uns = t((n_recv, H), "bf16")                            # inverse sort_chunks
        free(cat)
        s["back"] = t((n_send, H), "bf16", COMM)                # all-to-all back, saved by unpermute
        free(uns)
        moe = t((T, H), "bf16")                                 # unpermute, weighted by probs
        x = t((T, H), "fp32")
        free(moe)
        saved.append(s)
    head = {"x": x, "rstd": t(T, "fp32")}
    nf = t((T, H), "fp32")
    head["nfb"] = t((T, H), "bf16")
    free(nf)
    head["wlm"] = t(P.shapes[lp["lm_head"]], "bf16")
    lg = t((T, VOCAB), "bf16")
    lg32 = t((T, VOCAB), "fp32")                                # logits.float()
    free(lg)
    head["lsm"] = t((T, VOCAB), "fp32")                         # cross_entropy's log_softmax
    loss = t(1, "fp32")
    free(lg32)                                                  # the model's outputs dropped
    head["loss"] = loss
    return ids, labels, saved, head


def _backward(rec, P, lp, saved, head, ids, labels, counts):
    t, free = rec.tensor, rec.free
    T, H = MICRO_TOKENS, HIDDEN
    free(head["loss"])
    dl = t((T, VOCAB), "fp32")                                  # log_softmax backward
    free(head["lsm"])
    dlb = t((T, VOCAB), "bf16")                                 # through .float()
    free(dl)
    dnfb = t((T, H), "bf16")
    P.cast_grad(lp["lm_head"])
    free(dlb)
    free(head["wlm"])
    free(head["nfb"])
    g = t((T, H), "fp32")                                       # final norm backward
    P.grad(lp["norm"])
    free(dnfb)
    free(head["rstd"])
    free(head["x"])
    for layer in reversed(range(LAYERS)):
        pr, s = lp[layer], saved[layer]
        n_send, recv_counts = counts[layer]
        n_recv = sum(recv_counts)
        dmoe = t((T, H), "bf16")
        dback = t((n_send, H), "bf16")                          # unpermute backward
        dtopv = t((T, TOPK), "fp32")
        free(s["back"])
        free(dmoe)
        duns = t((n_recv, H), "bf16", COMM)                     # all-to-all backward
        free(dback)
        dcat = t((n_recv, H), "bf16")                           # inverse sort backward
        free(duns)
        dins = []
        for e in reversed(range(LOCAL)):
            r, ex = recv_counts[e], s["experts"][e]
            P.cast_grad(pr["w2"][e])
            dact = t((r, FFN), "bf16")
            free(ex["act"])
            free(ex["w2"])
            dfc1 = t((r, 2 * FFN), "bf16")                      # SwiGLU backward
            free(dact)
            free(ex["fc1"])
            P.cast_grad(pr["w13"][e])
            dins.append(t((r, H), "bf16"))
            free(dfc1)
            free(ex["w13"])
        free(dcat)
        dsorted = t((n_recv, H), "bf16")                        # torch.cat of the experts' input grads
        rec.free_all(dins)
        drecv = t((n_recv, H), "bf16")                          # sort_chunks backward
        free(dsorted)
        free(s["sorted"])
        dsend = t((n_send, H), "bf16", COMM)                    # all-to-all backward
        free(drecv)
        dn2b = t((T, H), "bf16")                                # permute backward
        free(dsend)
        free(s["sidx"])
        dprobs = t((T, EXPERTS), "fp32")
        free(dtopv)
        dlog = t((T, EXPERTS), "fp32")                          # softmax backward
        free(dprobs)
        for k in ("probs", "topv", "topi", "rmap"):
            free(s[k])
        P.grad(pr["router"])
        dn2r = t((T, H), "fp32")
        free(dlog)
        dn2 = t((T, H), "fp32")
        free(dn2b)
        free(dn2r)
        free(s["n2"])
        dx1 = t((T, H), "fp32")                                 # RMSNorm backward + residual
        P.grad(pr["ln2"])
        free(dn2)
        free(g)
        free(s["rstd2"])
        do = t((T, H), "bf16")
        P.cast_grad(pr["o"])
        dattn = t((T, H), "bf16")
        free(do)
        free(s["wo"])
        free(s["attn"])
        dqkv = t((T, 3 * H), "bf16")                            # flash attention backward
        free(dattn)
        free(s["lse"])
        free(s["qkv"])
        P.cast_grad(pr["qkv"])
        dn1b = t((T, H), "bf16")
        free(dqkv)
        free(s["wqkv"])
        free(s["n1b"])
        g = t((T, H), "fp32")                                   # RMSNorm backward + residual
        P.grad(pr["ln1"])
        free(dn1b)
        free(dx1)
        free(s["rstd1"])
        free(s["x1"])
        free(s["x"])
    P.grad(lp["embed"])                                         # embedding_dense_backward
    free(g)
    free(ids)
    free(labels)


def generate(rec, rng, steps):
    P = _Params(rec)
    lp = {"embed": P.add((VOCAB, HIDDEN))}
    for layer in range(LAYERS):
        lp[layer] = {"ln1": P.add(HIDDEN), "qkv": P.add((3 * HIDDEN, HIDDEN)), "o": P.add((HIDDEN, HIDDEN)),
                     "ln2": P.add(HIDDEN), "router": P.add((EXPERTS, HIDDEN)),
                     "w13": [], "w2": []}
        for _ in range(LOCAL):
            lp[layer]["w13"].append(P.add((2 * FFN, HIDDEN)))
            lp[layer]["w2"].append(P.add((HIDDEN, FFN)))
    lp["norm"] = P.add(HIDDEN)
    lp["lm_head"] = P.add((VOCAB, HIDDEN))

    router = _Router(rng)
    for step in range(steps):
        rec.step()
        if step == 0:                        # the extremes: every token kept, every local expert full
            counts = [(MICRO_TOKENS * TOPK, [EP * CAP] * LOCAL) for _ in range(LAYERS)]
        else:
            counts = [router.counts(layer) for layer in range(LAYERS)]
        ids, labels, saved, head = _forward(rec, P, lp, counts)
        _backward(rec, P, lp, saved, head, ids, labels, counts)
        if (step + 1) % ACCUM == 0:
            P.optimizer_step()
            router.drift()
            if step + 1 == ACCUM:
                rec.warmup_done()
    rec.warmup_done()                        # a run shorter than one accumulation cycle

