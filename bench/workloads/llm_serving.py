"""LLM serving with continuous batching and per-request KV caches grown by re-allocation.

What it models: one GPU serving a Llama-3-8B-shaped model (bf16, 32 layers, hidden 4096, GQA with
8 key/value heads of 128, SwiGLU FFN 14336, vocabulary 128256) the way HF-style servers do it, i.e.
with dynamic caches rather than vLLM's pre-allocated paged pool:

* the weights are allocated once at start, tensor by tensor as `from_pretrained` loads them
  (q/k/v/o, gate/up/down and two norms per layer, embedding, final norm, lm_head);
* each request owns a key and a value tensor per layer, `[1, kv_heads, capacity, head_dim]`, as
  transformers' `DynamicCache.update` keeps them, except that the capacity grows in chunks of
  KV_CHUNK tokens: when a request's cache is full, the layer's update allocates the larger tensor,
  copies (`torch.cat`) and drops the old one. For typical lengths these are 1-5 MiB pieces that live
  as long as the request;
* an engine iteration (one step) first prefills the requests admitted this iteration (one packed
  forward over their prompt tokens, flash-attention varlen, so activations are [tokens, ...];
  logits only for each prompt's last token, as `generate` does with `logits_to_keep`), then decodes
  the requests already running (one forward with one token per request), as
  text-generation-inference's router alternates prefill and decode batches;
* per forward and per layer, as the serving kernels of vLLM and TGI do it: the residual add and
  RMSNorm fused and in place (no allocation), fused qkv projection, attention output, o_proj,
  fused gate/up projection, SiLU-and-mul, down projection; each temporary freed as soon as the next
  one is made;
* sampling as transformers' `generate` does it: the last-token logits cast to fp32, temperature,
  top-p (sort, softmax, cumsum, mask, scatter back, masked_fill), softmax, multinomial;
* requests arrive at random (Poisson arrivals whose rate drifts slowly, so load swings), wait in a
  FIFO queue, and are admitted while the running batch is under MAX_BATCH, the reserved tokens
  (prompt + requested max_new_tokens, as TGI's `max_total_tokens` accounting does) fit the budget,
  and the iteration's prefill tokens fit MAX_PREFILL_TOKENS (TGI's `max_batch_prefill_tokens`);
  a request finishes at its drawn output length (an EOS before max_new_tokens) and its cache is
  freed at once, so the batch changes every iteration;
* prompt lengths and output lengths are drawn from log-normal distributions (ShareGPT-like: median
  prompt ~400 tokens, median output ~180), bounded by MAX_PROMPT and the request's max_new_tokens.

The warm-up is the profile run such servers do before serving (vLLM's `profile_run`, TGI's
`warmup`): a prefill at MAX_PREFILL_TOKENS of the longest prompts with caches at the longest
capacity, then a decode at MAX_BATCH, then `torch.cuda.empty_cache()`. Every later shape lies
within those bounds. One stream: these servers run on the default stream.
"""
import math

from .common import nbytes

FAMILY = "llm_serving"
DESCRIPTION = ("LLM serving, Llama-3-8B-shaped bf16, continuous batching with per-request per-layer KV caches "
               "grown by re-allocation every 64 tokens (HF DynamicCache / TGI-style prefill+decode iterations)")
DEFAULT_STEPS = 5000

LAYERS = 32
HIDDEN = 4096
HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128
FFN = 14336
VOCAB = 128256
QKV = HIDDEN + 2 * KV_HEADS * HEAD_DIM

KV_CHUNK = 64                 # tokens of cache capacity added per re-allocation
MAX_BATCH = 64                # running requests
MAX_PROMPT = 4096
MAX_NEW_CHOICES = (256, 512, 1024, 2048)
MAX_NEW_WEIGHTS = (0.30, 0.35, 0.25, 0.10)
MAX_NEW = max(MAX_NEW_CHOICES)
MAX_PREFILL_TOKENS = 8192     # prompt tokens prefilled per iteration
MAX_TOTAL_TOKENS = 96 * 1024  # reserved tokens (prompt + max_new_tokens) over the running batch

BF16 = "bf16"


def _round_up(n, k):
    return (n + k - 1) // k * k


def _kv_piece(cap):
    return nbytes((1, KV_HEADS, cap, HEAD_DIM), BF16)


class _Request:
    __slots__ = ("prompt", "max_new", "out_len", "generated", "cap", "kv")

    def __init__(self, prompt, max_new, out_len):
        self.prompt, self.max_new, self.out_len = prompt, max_new, out_len
        self.generated = 0
        self.cap = 0
        self.kv = None        # [layer][0=key, 1=value] ids

    def length(self):
        return self.prompt + self.generated


def _poisson(rng, lam):
    if lam <= 0:
        return 0
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


def _draw_request(rng):
    prompt = int(min(MAX_PROMPT, max(16, rng.lognormvariate(math.log(400), 1.0))))
    max_new = rng.choices(MAX_NEW_CHOICES, MAX_NEW_WEIGHTS)[0]
    out_len = int(min(max_new, max(1, rng.lognormvariate(math.log(180), 0.9))))
    return _Request(prompt, max_new, out_len)


def _load_weights(rec):
    t = rec.tensor
    ids = [t((VOCAB, HIDDEN), BF16)]
    for _ in range(LAYERS):
        ids += [t(HIDDEN, BF16),
                t((HEADS * HEAD_DIM, HIDDEN), BF16), t((KV_HEADS * HEAD_DIM, HIDDEN), BF16),
                t((KV_HEADS * HEAD_DIM, HIDDEN), BF16), t((HIDDEN, HEADS * HEAD_DIM), BF16),
                t(HIDDEN, BF16),
                t((FFN, HIDDEN), BF16), t((FFN, HIDDEN), BF16), t((HIDDEN, FFN), BF16)]
    ids += [t(HIDDEN, BF16), t((VOCAB, HIDDEN), BF16)]
    ids.append(t(HEAD_DIM // 2, "fp32"))   # rotary inv_freq buffer
    return ids


def _forward(rec, tokens, n_logits, new_reqs, grow_reqs):
    """One model forward over `tokens` packed tokens; returns the bf16 logits [n_logits, VOCAB].
    new_reqs get their caches made layer by layer (prefill); grow_reqs have a full cache that the
    layer's update re-allocates KV_CHUNK tokens larger (decode)."""
    t, free = rec.tensor, rec.free
    ids = t(tokens, "int64")
    pos = t(tokens, "int64")
    cos = t((tokens, HEAD_DIM), "fp32")
    sin = t((tokens, HEAD_DIM), "fp32")
    h = t((tokens, HIDDEN), BF16)                      # embedding lookup
    free(ids)
    residual = t((tokens, HIDDEN), BF16)               # the residual stream, updated in place
    for layer in range(LAYERS):
        # fused add + RMSNorm writes h and residual in place
        qkv = t((tokens, QKV), BF16)
        free(h)
        for r in new_reqs:                             # DynamicCache.update, first call for the layer
            r.kv[layer] = [rec.alloc(_kv_piece(r.cap)), rec.alloc(_kv_piece(r.cap))]
        for r in grow_reqs:                            # torch.cat into a larger cache, old one dropped
            kv = r.kv[layer]
            for j in (0, 1):
                new = rec.alloc(_kv_piece(r.cap))
                free(kv[j])
                kv[j] = new
        attn = t((tokens, HEADS * HEAD_DIM), BF16)
        free(qkv)
        h = t((tokens, HIDDEN), BF16)                  # o_proj
        free(attn)
        # fused add + RMSNorm in place
        gu = t((tokens, 2 * FFN), BF16)
        free(h)
        act = t((tokens, FFN), BF16)                   # SiLU(gate) * up
        free(gu)
        h = t((tokens, HIDDEN), BF16)                  # down_proj
        free(act)
    # the final norm, fused with the last residual add, in place
    free(residual)
    free(cos)
    free(sin)
    free(pos)
    hn = h
    if n_logits != tokens:                             # logits_to_keep: last token of each prompt
        hn = t((n_logits, HIDDEN), BF16)
        free(h)
    logits = t((n_logits, VOCAB), BF16)
    free(hn)
    return logits


def _sample(rec, logits, rows):
    """transformers' generate: fp32 last-token logits, temperature, top-p, softmax, multinomial."""
    t, free = rec.tensor, rec.free
    v = (rows, VOCAB)
    f = t(v, "fp32")
    free(logits)
    scaled = t(v, "fp32")
    free(f)
    sorted_vals = t(v, "fp32")
    sorted_idx = t(v, "int64")
    sm = t(v, "fp32")
    cum = t(v, "fp32")
    free(sm)
    remove = t(v, "bool")
    free(cum)
    mask = t(v, "bool")
    free(remove)
    free(sorted_vals)
    free(sorted_idx)
    filtered = t(v, "fp32")
    free(mask)
    free(scaled)
    probs = t(v, "fp32")
    free(filtered)
    nxt = t(rows, "int64")
    free(probs)
    free(nxt)                                          # copied to the host, appended to the outputs


def _finish(rec, r):
    for kv in r.kv:
        rec.free(kv[0])
        rec.free(kv[1])
    r.kv = None


def _prefill(rec, reqs):
    for r in reqs:
        r.cap = _round_up(r.prompt + 1, KV_CHUNK)
        r.kv = [None] * LAYERS
    tokens = sum(r.prompt for r in reqs)
    logits = _forward(rec, tokens, len(reqs), reqs, ())
    _sample(rec, logits, len(reqs))
    for r in reqs:
        r.generated = 1


def _decode(rec, running):
    grow = []
    for r in running:                                  # the fed token's K/V go to position length() - 1
        if r.length() > r.cap:
            r.cap += KV_CHUNK
            grow.append(r)
    logits = _forward(rec, len(running), len(running), (), grow)
    _sample(rec, logits, len(running))
    for r in running:
        r.generated += 1


def generate(rec, rng, steps):
    _load_weights(rec)

    # ---- profile run (warm-up): the largest prefill, the longest cache, the largest decode batch ----
    rec.step()
    dummies = [_Request(MAX_PROMPT, MAX_NEW, MAX_NEW) for _ in range(MAX_PREFILL_TOKENS // MAX_PROMPT)]
    for r in dummies:
        r.kv = [None] * LAYERS
        r.cap = _round_up(MAX_PROMPT + MAX_NEW, KV_CHUNK)
    logits = _forward(rec, MAX_PREFILL_TOKENS, len(dummies), dummies, ())
    _sample(rec, logits, len(dummies))
    rec.step()
    small = [_Request(1, 1, 1) for _ in range(MAX_BATCH - len(dummies))]
    for r in small:
        r.cap = KV_CHUNK
        r.kv = [[rec.alloc(_kv_piece(KV_CHUNK)), rec.alloc(_kv_piece(KV_CHUNK))] for _ in range(LAYERS)]
    logits = _forward(rec, MAX_BATCH, MAX_BATCH, (), ())
    _sample(rec, logits, MAX_BATCH)
    for r in dummies + small:
        _finish(rec, r)
    rec.empty_cache()
    rec.warmup_done()

    # ---- serving ----
    waiting, running = [], []
    reserved = 0
    load = 1.0
    for _ in range(steps - 2):
        rec.step()
        # offered load: a slow random walk around the rate that keeps the batch near full
        load = min(1.6, max(0.3, load + rng.gauss(0.0, 0.03)))
        for _ in range(_poisson(rng, 0.26 * load)):
            waiting.append(_draw_request(rng))

        admitted, prefill_tokens = [], 0
        while waiting and len(running) + len(admitted) < MAX_BATCH:
            r = waiting[0]
            need = r.prompt + r.max_new
            if reserved + need > MAX_TOTAL_TOKENS or prefill_tokens + r.prompt > MAX_PREFILL_TOKENS:
                break
            waiting.pop(0)
            admitted.append(r)
            reserved += need
            prefill_tokens += r.prompt

        decoding = list(running)
        if admitted:
            _prefill(rec, admitted)
            for r in admitted:
                if r.generated >= r.out_len:
                    _finish(rec, r)
                    reserved -= r.prompt + r.max_new
                else:
                    running.append(r)
        if decoding:
            _decode(rec, decoding)
            still = []
            for r in running:
                if r.generated >= r.out_len:
                    _finish(rec, r)
                    reserved -= r.prompt + r.max_new
                else:
                    still.append(r)
            running = still
