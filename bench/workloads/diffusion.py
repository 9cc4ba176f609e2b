"""Text-to-image diffusion training with aspect-ratio buckets, modelled on diffusers'
examples/text_to_image/train_text_to_image.py fine-tuning Stable Diffusion 1.5 (UNet2DConditionModel,
AutoencoderKL, CLIP ViT-L/14 text encoder) with --use_ema, --mixed_precision bf16 and
--validation_prompts, batches drawn per aspect-ratio bucket as kohya-ss sd-scripts and SimpleTuner
form them.

Models. The UNet is SD 1.5's (block_out_channels 320/640/1280/1280, two layers per down block and
three per up block, cross-attention at the three highest resolutions with 8 heads and a text
context of 77 x 768, a GEGLU feed-forward of 4x, no attention at the lowest level apart from the
mid block): fp32 parameters, trained, under bf16 autocast. Modelled coarsely, as units: a ResNet
block followed by its Transformer2DModel ("pair"), a lone ResNet block, a down- or up-sampler,
conv_in, conv_out and the time embedding; each unit has one fp32 parameter tensor (31 in all, 859.5 M
parameters; diffusers' has 686). The VAE (bf16, frozen) and the text encoder (bf16, frozen) run
without a graph.

Attention is computed as diffusers' AttnProcessor does (the processor diffusers uses where PyTorch 2's
scaled_dot_product_attention is missing, or when set explicitly): `baddbmm` on an empty [B*heads, N, N] tensor, softmax, `bmm`; the
probabilities are saved for the backward, so each self-attention keeps B*8*N^2 bf16 elements, N the
latent tokens at its level (4096 at 512x512 at the highest).

A training step (the script's loop, one optimizer step per batch):
* the batch: fp32 pixel_values [B,3,H,W] and int64 input_ids [B,77] sent to the device (accelerate's
  DataLoaderShard sends batch k+1 before the loop drops batch k);
* `vae.encode(pixel_values.to(bf16)).latent_dist.sample() * scaling_factor`, without a graph: per
  level its ResNet blocks' temporaries (GroupNorm, SiLU, conv outputs), the downsampler's F.pad copy,
  the mid block's single-head attention over the latent tokens, the moments, std, var and the sample;
* noise, timesteps (uniform over 1000, drawn per sample: they change no shape), add_noise's
  temporaries; the text encoder's 12 layers over [B,77,768] (modelled four at a time);
* the UNet forward: per unit its saved tensors (GroupNorm's fp32 outputs under autocast, SiLU's
  inputs, convs' bf16 inputs, the weight casts, LayerNorm's fp32 outputs, q/k/v, the attention
  probabilities, the cross-attention's, GEGLU's), the attention's baddbmm input and scores made and
  dropped, the fp32 SiLU outputs dropped once cast; the down path's outputs are the skips, kept (the
  next down unit saves each) until their matching up block concatenates them; the up path's hidden
  state dropped once concatenated or interpolated;
* `F.mse_loss(model_pred.float(), target.float())`, the loss gathered for logging;
* the backward in reverse: each unit's gradients and its saved tensors freed; the gradient of a
  concatenation kept (its skip's half a view) until the matching down unit's gradient arrives and is
  added to it; each parameter's fp32 `.grad` made as the backward reaches it;
* `clip_grad_norm_` (foreach norms, stack, clip coefficient), AdamW (foreach: exp_avg, exp_avg_sq
  at the first step; `_foreach_sqrt` temporaries each step), `zero_grad()` (set to None),
  `ema_unet.step()` with --foreach_ema (one temporary list of `s_param - param`); the EMA's fp32
  shadow copy of the UNet is kept from the start.

Buckets: sides multiples of 64 with area at most 512x512, from 256x1024 to 1024x256, square to 4:1,
each batch (4 images) from one bucket, the squarer buckets more frequent (weights assumed). The
tokens at a UNet level are (H/8)(W/8)/4^level, at most 4096.

Validation (the script's log_validation, here at the start, as sd-scripts' --sample_at_first does,
and every VALIDATION_EPOCHS epochs of this rank's 1250 images): a StableDiffusionPipeline on the
trained UNet under `torch.autocast("cuda")` (fp16), per prompt: the prompt and the empty negative
prompt encoded, 20 PNDM steps of the UNet at batch 2 (classifier-free guidance) without a graph, the
fp16 weight casts cached by autocast for the whole prompt, PNDM's list of past outputs kept, then the
VAE decode at 512x512; each denoising step is a step of the trace; `torch.cuda.empty_cache()` when
the pipeline is deleted.

Warm-up: the validation at the start and the first two training steps, both at 4096-token buckets
(the largest: every bucket's tensors are at most theirs; the first at 1024x256, whose F.pad copy in
the VAE is the largest), the first making the AdamW state, the second the first with it live.
"""
FAMILY = "diffusion"
DESCRIPTION = ("SD 1.5 UNet fine-tuning (diffusers train_text_to_image, bf16 autocast, EMA, AdamW) on aspect-ratio "
               "buckets: VAE encode, CLIP text, N^2 attention probs, skips to the up blocks; fp16 validation sampling")
DEFAULT_STEPS = 5000

BATCH = 4
HEADS = 8
CTX, CTX_DIM = 77, 768
CH = (320, 640, 1280, 1280)
VAE_CH = (128, 256, 512, 512)
TE_LAYERS, TE_DIM, TE_FF = 12, 768, 3072
TIMESTEPS = 1000
# (width, height, weight): area <= 512*512, sides multiples of 64; both orientations
BUCKETS = ((512, 512, 6), (576, 448, 4), (640, 384, 3), (704, 320, 1.5), (768, 320, 1), (832, 256, 0.7),
           (896, 256, 0.5), (960, 256, 0.4), (1024, 256, 0.3))
EPOCH_STEPS = 10000 // 8 // BATCH      # one rank's share of a 10,000-image fine-tuning set
VALIDATION_EPOCHS = 5
VAL_PROMPTS, VAL_STEPS, VAL_SIZE = 2, 20, 512


def _resnet_params(i, o):
    return 9 * i * o + o + 9 * o * o + o + 1280 * o + o + 2 * i + 2 * o + (i * o + o if i != o else 0)


def _transformer_params(c):
    return (2 * c + c * c + c + 4 * c * c + c + 6 * c + 2 * c * c + 2 * CTX_DIM * c + c
            + 8 * c * c + 8 * c + 4 * c * c + c + c * c + c)


def _architecture():
    """The UNet's units in forward order: (kind, c_in, c_out, level, skip), skip the index of the
    down-path output an up unit concatenates; and the channels of each down-path output."""
    units = [("conv_in", 4, CH[0], 0, None)]
    skips = [CH[0]]
    c = CH[0]
    for lvl, co in enumerate(CH):
        for _ in range(2):
            units.append(("pair" if lvl < 3 else "res", c, co, lvl, None))
            c = co
            skips.append(c)
        if lvl < 3:
            units.append(("down", c, c, lvl, None))
            skips.append(c)
    units.append(("pair", c, c, 3, None))                      # the mid block
    units.append(("res", c, c, 3, None))
    stack = list(range(len(skips)))
    for lvl in (3, 2, 1, 0):
        co = CH[lvl]
        for _ in range(3):
            k = stack.pop()
            units.append(("pair" if lvl < 3 else "res", c + skips[k], co, lvl, k))
            c = co
        if lvl > 0:
            units.append(("up", c, c, lvl, None))
    units.append(("conv_out", c, 4, 0, None))
    return units, skips


def _unit_params(kind, ci, co):
    if kind == "pair":
        return _resnet_params(ci, co) + _transformer_params(co)
    if kind == "res":
        return _resnet_params(ci, co)
    if kind in ("down", "up", "conv_in"):
        return 9 * ci * co + co
    return 2 * ci + 9 * ci * co + co                              # conv_out and its GroupNorm


class _Trainer:
    def __init__(self, rec):
        self.rec = rec
        t = rec.tensor
        self.units, self.skip_ch = _architecture()
        self.mid = next(i for i, u in enumerate(self.units) if u[0] == "pair" and u[3] == 3)
        # which units' outputs are the down path's (the skips), their levels, and which unit saves each
        self.skip_of = {}                                       # unit -> index of the skip it makes
        self.skip_lvl = []
        for u, (kind, ci, co, lvl, k) in enumerate(self.units):
            if kind in ("conv_in", "down") or (kind in ("pair", "res") and u < self.mid):
                self.skip_of[u] = len(self.skip_lvl)
                self.skip_lvl.append(lvl + 1 if kind == "down" else lvl)
        self.input_skip = {u + 1: s for u, s in self.skip_of.items()}   # the next unit saves it
        self.pcount = [_unit_params(k, ci, co) for k, ci, co, _, _ in self.units]
        self.pcount.append(320 * 1280 + 1280 + 1280 * 1280 + 1280)   # time_embedding
        self.params = [t(n, "fp32") for n in self.pcount]
        self.pbytes = [4 * n for n in self.pcount]
        self.ema = [t(n, "fp32") for n in self.pcount]          # EMAModel: p.clone().detach(), kept
        self.vae = [t(n, "bf16") for n in (34_163_592, 49_490_179)]  # encoder, decoder (frozen)
        self.te = [t(n, "bf16") for n in (38_000_000, 85_060_608)]  # embeddings, layers (frozen)
        self.alphas = None
        self.grads = None
        self.adam = None
        self.batch = None
        self.prev = []

    def _a(self, nbytes):
        return self.rec.alloc(nbytes)

    def _grad(self, p):
        self.grads[p] = self.rec.alloc(self.pbytes[p])          # AccumulateGrad steals the fp32 grad

    # ---- the frozen models (no graph) ----
    def vae_encode(self, B, H, W):
        a, free = self._a, self.rec.free
        P = H * W
        x = a(2 * B * 3 * P)                                    # pixel_values.to(bf16)
        h = a(2 * B * VAE_CH[0] * P)                            # conv_in
        free(x)
        for lvl, c in enumerate(VAE_CH):
            p = P >> (2 * lvl)
            tmp = a(2 * 2 * B * c * p)                          # its two ResNet blocks' norm/act/conv temporaries
            o = a(2 * B * c * p)
            free(tmp)
            free(h)
            h = o
            if lvl < 3:
                pad = a(2 * B * c * (H // (1 << lvl) + 1) * (W // (1 << lvl) + 1))   # F.pad(h, (0, 1, 0, 1))
                free(h)
                h = a(2 * B * c * (p // 4))
                free(pad)
        n = P >> 6
        o = self._vae_mid(B, n, h)
        tmp = a(2 * 2 * B * VAE_CH[3] * n)                      # norm_out, SiLU
        mom = a(2 * B * 8 * n)                                  # conv_out: the moments
        free(tmp)
        free(o)
        q = a(2 * B * 8 * n)                                    # quant_conv
        free(mom)
        dist = a(3 * 2 * B * 4 * n)                             # logvar.clamp, std, var
        eps = a(2 * B * 4 * n)                                  # sample(): randn
        z = a(2 * B * 4 * n)
        free(eps)
        lat = a(2 * B * 4 * n)                                  # * scaling_factor
        for i in (z, dist, q):
            free(i)
        return lat

    def _vae_mid(self, B, n, h):
        """The VAE's mid block: its single-head attention over n tokens (its ResNet blocks' temporaries
        are the last level's size)."""
        a, free = self._a, self.rec.free
        c = VAE_CH[3]
        qkv = a(2 * 4 * B * c * n)                              # GroupNorm, q, k, v
        e = a(2 * B * n * n)                                    # baddbmm's empty input
        sc = a(2 * B * n * n)
        free(e)
        pr = a(2 * B * n * n)
        free(sc)
        ao = a(2 * B * c * n)
        free(pr)
        free(qkv)
        o = a(2 * B * c * n)                                    # to_out + residual
        free(ao)
        free(h)
        return o

    def vae_decode(self, B, H, W):
        a, free = self._a, self.rec.free
        n = (H // 8) * (W // 8)
        z = a(2 * B * 4 * n)                                    # latents / scaling_factor
        q = a(2 * B * 4 * n)                                    # post_quant_conv
        free(z)
        h = a(2 * B * VAE_CH[3] * n)                            # conv_in
        free(q)
        h = self._vae_mid(B, n, h)
        for lvl in (3, 2, 1, 0):
            c = VAE_CH[lvl]
            p = n << (2 * (3 - lvl))
            for _ in range(3):
                tmp = a(2 * 2 * B * c * p)
                o = a(2 * B * c * p)
                free(tmp)
                free(h)
                h = o
            if lvl > 0:
                i = a(2 * B * c * p * 4)                        # F.interpolate(scale_factor=2.0), then conv
                free(h)
                h = a(2 * B * c * p * 4)
                free(i)
        img = a(2 * B * 3 * H * W)                              # norm_out, SiLU, conv_out
        free(h)
        out = [a(4 * B * 3 * H * W) for _ in range(2)]          # (image / 2 + 0.5).clamp(0, 1).float()
        free(img)
        self.rec.free_all(out)

    def text_encode(self, B):
        a, free = self._a, self.rec.free
        h = a(2 * B * CTX * TE_DIM)
        mask = a(2 * B * CTX * CTX)                             # the causal mask [B,1,77,77]
        for _ in range(TE_LAYERS // 4):                         # four layers at a time
            tmp = a(2 * B * CTX * TE_FF)                        # the MLP's hidden (attention's are smaller)
            nh = a(2 * B * CTX * TE_DIM)
            free(tmp)
            free(h)
            h = nh
        out = a(2 * B * CTX * TE_DIM)                           # final_layer_norm: last_hidden_state
        free(h)
        free(mask)
        return out

    # ---- the UNet's units in training ----
    def _pair_fwd(self, u, B, S, ci, c, cat):
        a, free = self._a, self.rec.free
        sv = {}
        # [an up unit's torch.cat,] the ResNet block's weight cast, GN1 fp32, conv1's bf16 input, conv1 +
        # temb, GN2 fp32, conv2's input; the transformer's input, GN, proj_in, LN1 fp32 and its cast, q, k, v
        sv["r"] = a(cat + 2 * self.pcount[u] + 6 * B * ci * S + 8 * B * c * S + 22 * B * c * S)
        t = a(4 * B * max(ci, c) * S)                           # a SiLU's fp32 output, cast and dropped
        free(t)
        e = a(2 * B * HEADS * S * S)                            # baddbmm_input = torch.empty(...)
        sc = a(2 * B * HEADS * S * S)
        free(e)
        sv["p"] = a(2 * B * HEADS * S * S)                      # softmax: the probabilities, saved
        free(sc)
        sv["t2"] = a(50 * B * c * S + 2 * B * HEADS * S * CTX + 4 * B * CTX * c)   # attn out, cross-attn, GEGLU
        return sv, a(2 * B * c * S)                             # proj_out + residual

    def _pair_bwd(self, u, B, S, ci, c, sv):
        a, free = self._a, self.rec.free
        free(sv["t2"])                                          # the feed-forward's and cross-attention's
        dp = a(2 * B * HEADS * S * S)                           # bmm's backward: grad of the probabilities
        ds = a(2 * B * HEADS * S * S)                           # softmax's backward
        free(dp)
        free(sv["p"])
        dq = a(8 * B * c * S)                                   # q, k, v and the block's grads
        free(ds)
        gx = a(2 * B * ci * S)
        free(dq)
        free(sv["r"])
        self._grad(u)
        return gx

    def _res_fwd(self, u, B, S, ci, c, cat):
        a, free = self._a, self.rec.free
        sv = {"r": a(cat + 2 * self.pcount[u] + 6 * B * ci * S + 8 * B * c * S)}
        t = a(4 * B * max(ci, c) * S)
        free(t)
        return sv, a(2 * B * c * S)

    def _res_bwd(self, u, B, S, ci, c, sv):
        a, free = self._a, self.rec.free
        dR = a(8 * B * c * S)                                   # GroupNorm's fp32 backward, conv grads
        gx = a(2 * B * ci * S)
        free(dR)
        free(sv["r"])
        self._grad(u)
        return gx

    def _unet_train(self, B, S0, noisy):
        """The UNet's forward and backward; returns its output (model_pred), freed by the caller."""
        rec, a, free = self.rec, self._a, self.rec.free
        tp = a(4 * B * 320)                                     # time_proj, fp32
        emb = a(2 * B * 1280 * 2)                               # time_embedding (linear, SiLU, linear)
        tape = []
        skips = {}
        h = noisy
        for u, (kind, ci, co, lvl, k) in enumerate(self.units):
            S = S0 >> (2 * lvl)
            x = h
            if kind == "conv_in":
                sv = {"w": a(2 * self.pcount[u])}
                h = a(2 * B * co * S)
            elif kind in ("pair", "res"):
                cat = 2 * B * ci * S if k is not None else 0
                sv, h = (self._pair_fwd if kind == "pair" else self._res_fwd)(u, B, S, ci, co, cat)
                if k is not None:
                    free(x)                                     # up path: concatenated (the cat is in sv["r"])
            elif kind == "down":
                sv = {"w": a(2 * self.pcount[u])}
                h = a(2 * B * co * (S // 4))
            elif kind == "up":
                sv = {"w": a(2 * self.pcount[u] + 2 * B * ci * S * 4)}   # weight cast + interpolated input
                free(x)
                h = a(2 * B * co * S * 4)
            else:                                               # conv_out: GroupNorm fp32, SiLU, cast
                sv = {"w": a(2 * self.pcount[u] + 6 * B * ci * S)}
                t = a(4 * B * ci * S)
                free(t)
                h = a(2 * B * co * S)
            sv["x"] = x
            if u in self.skip_of:
                skips[self.skip_of[u]] = h
            tape.append((u, kind, ci, co, lvl, k, sv))
        pred = h
        p32, t32 = a(4 * B * 4 * S0), a(4 * B * 4 * S0)         # model_pred.float(), target.float()
        loss = a(4)
        gl = [a(4 * B), a(4 * B * 8), a(4)]                     # loss.repeat, accelerator.gather, mean
        rec.free_all(gl)
        # ---- accelerator.backward(loss) ----
        self.grads = {}
        d32 = a(4 * B * 4 * S0)
        free(p32)                                               # what mse_loss saved
        free(t32)
        g = a(2 * B * 4 * S0)                                   # back to bf16
        free(d32)
        pending = {}                                            # skip -> its concatenation's gradient
        g_view = False
        for u, kind, ci, co, lvl, k, sv in reversed(tape):
            S = S0 >> (2 * lvl)
            if kind == "conv_out":
                gx = a(2 * B * ci * S)
                free(sv["w"])
                self._grad(u)
                free(sv["x"])                                   # GroupNorm saved the last up unit's output
            elif kind == "up":
                gi = a(2 * B * ci * S * 4)                      # the conv's grad input
                self._grad(u)
                free(sv["w"])
                gx = a(2 * B * ci * S)                          # interpolate's backward
                free(gi)
            elif kind in ("pair", "res"):
                gx = (self._pair_bwd if kind == "pair" else self._res_bwd)(u, B, S, ci, co, sv)
            elif kind == "down":
                gx = a(2 * B * ci * S)
                self._grad(u)
                free(sv["w"])
            else:                                               # conv_in: its input needs no gradient
                gx = None
                self._grad(u)
                free(sv["w"])
            if not g_view:
                free(g)
            g, g_view = gx, False
            if k is not None:
                pending[k] = gx                                 # the skip's half waits, the other flows on
                g_view = True
            elif u in self.input_skip or u == self.mid + 1:
                free(sv["x"])                                   # this unit saved its input
                si = self.input_skip.get(u)
                if si is not None and si in pending:            # the skip's two gradients added
                    acc = a(2 * B * self.skip_ch[si] * (S0 >> (2 * self.skip_lvl[si])))
                    free(gx)
                    free(pending.pop(si))
                    g = acc
        self._grad(len(self.pcount) - 1)                        # time_embedding, reached last
        rec.free_all((tp, emb))
        return [pred, loss]

    def train_step(self, B, W, H):
        rec, a, free = self.rec, self._a, self.rec.free
        S0 = (H // 8) * (W // 8)
        batch = (a(4 * B * 3 * H * W), a(8 * B * CTX))         # pixel_values, input_ids
        if self.batch:
            rec.free_all(self.batch)
        self.batch = batch
        lat = self.vae_encode(B, H, W)
        rec.free_all(self.prev)                                 # last step's variables, rebound
        noise = a(2 * B * 4 * S0)
        ts = a(8 * B)
        if self.alphas is None:
            self.alphas = a(4 * TIMESTEPS)                      # alphas_cumprod moved to the device once
        ac = a(2 * TIMESTEPS)                                   # .to(latents.dtype)
        sab = a(2 * 2 * B)                                      # sqrt_alpha_prod, sqrt_one_minus_alpha_prod
        x12 = a(2 * 2 * B * 4 * S0)                             # their products with latents and noise
        noisy = a(2 * B * 4 * S0)
        rec.free_all((x12, sab, ac))
        enc = self.text_encode(B)
        out = self._unet_train(B, S0, noisy)
        self.prev = [lat, noise, ts, noisy, enc] + out
        # ---- clip_grad_norm_, optimizer.step(), zero_grad(), ema_unet.step() ----
        n = len(self.params)
        norms = [a(4) for _ in range(n)]                        # _foreach_norm
        st = a(4 * n)
        rec.free_all(norms)
        tot, coef, clamped = a(4), a(4), a(4)
        rec.free_all((st, tot, coef, clamped))
        if self.adam is None:
            self.adam = [a(b) for b in self.pbytes for _ in range(2)]   # exp_avg, exp_avg_sq per parameter
        sq = [a(b) for b in self.pbytes]                        # _foreach_sqrt(exp_avg_sqs)
        rec.free_all(sq)
        rec.free_all(self.grads.values())
        self.grads = None
        diff = [a(b) for b in self.pbytes]                      # _foreach_sub(s_params, params)
        rec.free_all(diff)

    # ---- validation sampling ----
    def _unet_infer(self, B, S0, x0, casts):
        """One UNet call without a graph under fp16 autocast; casts: autocast's cache of weight casts."""
        a, free = self._a, self.rec.free
        tp = a(4 * B * 320)
        emb = a(2 * B * 1280)
        skips = {}
        h = x0
        for u, (kind, ci, co, lvl, k) in enumerate(self.units):
            S = S0 >> (2 * lvl)
            if u not in casts:
                casts[u] = a(2 * self.pcount[u])
            x = h
            if kind == "conv_in":
                h = a(2 * B * co * S)
            elif kind in ("pair", "res"):
                if k is not None:
                    cat = a(2 * B * ci * S)
                    free(x)
                    free(skips.pop(k))
                    x = cat
                t = a(4 * B * max(ci, co) * S)                  # GroupNorm fp32, SiLU
                r = a(2 * B * co * S)
                free(t)
                if kind == "pair":
                    n = a(12 * B * co * S)                      # GN, proj_in, LN, q, k, v
                    e = a(2 * B * HEADS * S * S)
                    sc = a(2 * B * HEADS * S * S)
                    free(e)
                    p = a(2 * B * HEADS * S * S)
                    free(sc)
                    ao = a(2 * B * co * S)
                    free(p)
                    free(n)
                    ff = a(16 * B * co * S)                     # GEGLU's projection
                    o = a(2 * B * co * S)
                    free(ff)
                    free(ao)
                    free(r)
                    r = o
                h = r
            elif kind == "down":
                h = a(2 * B * co * (S // 4))
            elif kind == "up":
                i = a(2 * B * ci * S * 4)
                h = a(2 * B * co * S * 4)
                free(i)
            else:
                t = a(4 * B * ci * S)
                h = a(2 * B * co * S)
                free(t)
            if x != x0 and x not in skips.values():             # a skip waits for its concatenation
                free(x)
            if u in self.skip_of:
                skips[self.skip_of[u]] = h
        free(tp)
        free(emb)
        return h

    def validate(self, steps_left):
        """log_validation: returns the steps it ran (each denoising step is one)."""
        rec, a, free = self.rec, self._a, self.rec.free
        S0 = (VAL_SIZE // 8) ** 2
        ran = 0
        held = []                                               # PNDM's ets, kept to the next set_timesteps
        for _ in range(VAL_PROMPTS):
            casts = {}
            rec.free_all(held)
            held = []
            for i in range(VAL_STEPS):
                if ran == steps_left:
                    return ran
                rec.step()
                ran += 1
                if i == 0:
                    pos = self.text_encode(1)
                    neg = self.text_encode(1)
                    emb = a(2 * 2 * CTX * TE_DIM)               # torch.cat([negative, prompt])
                    free(pos)
                    free(neg)
                    r = a(2 * 4 * S0)                           # randn latents
                    lat = a(2 * 4 * S0)                         # * init_noise_sigma
                    free(r)
                inp = a(2 * 2 * 4 * S0)                         # torch.cat([latents] * 2)
                pred = self._unet_infer(2, S0, inp, casts)
                free(inp)
                d = a(2 * 4 * S0)                               # text - uncond
                d2 = a(2 * 4 * S0)                              # * guidance_scale
                free(d)
                guided = a(2 * 4 * S0)                          # uncond + ...
                free(d2)
                free(pred)
                held.append(guided)                             # PNDM: self.ets.append(model_output)
                comb = a(2 * 4 * S0)                            # the PLMS combination of the ets
                nl = a(2 * 4 * S0)                              # prev_sample
                free(comb)
                free(lat)
                lat = nl
                if i == VAL_STEPS - 1:
                    self.vae_decode(1, VAL_SIZE, VAL_SIZE)
                    free(lat)
                    free(emb)
                    rec.free_all(casts.values())                # autocast's cache, cleared at its exit
        rec.free_all(held)                                      # del pipeline
        rec.empty_cache()
        return ran


def _draw_bucket(rng):
    total = sum(w for _, _, w in BUCKETS)
    x = rng.random() * total
    for w_, h_, w in BUCKETS:
        x -= w
        if x <= 0:
            break
    return (w_, h_) if rng.random() < 0.5 or w_ == h_ else (h_, w_)


def generate(rec, rng, steps):
    tr = _Trainer(rec)
    phases = []
    rec.extra["phases"] = phases
    done = 0
    phases.append([done, "sample"])
    done += tr.validate(steps - done)
    # the first batch at the most elongated bucket (the largest F.pad copy, 4096 tokens), the
    # second, the first with the AdamW state live, at the square one (4096 tokens too)
    first = [(BUCKETS[-1][0], BUCKETS[-1][1]), (BUCKETS[0][0], BUCKETS[0][1])]
    epoch, epoch_step = 0, 0
    while done < steps:
        if phases[-1][1] != "train":
            phases.append([done, "train"])
        w, h = first.pop(0) if first else _draw_bucket(rng)
        rec.step()
        tr.train_step(BATCH, w, h)
        done += 1
        if not first:
            rec.warmup_done()
        epoch_step += 1
        if epoch_step == EPOCH_STEPS:
            if epoch % VALIDATION_EPOCHS == 0 and done < steps:
                phases.append([done, "sample"])
                done += tr.validate(steps - done)
            epoch, epoch_step = epoch + 1, 0
    rec.warmup_done()
