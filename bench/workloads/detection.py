"""Instance segmentation training on COCO-like images, modelled on torchvision's detection reference
(references/detection/train.py) training torchvision.models.detection.maskrcnn_resnet50_fpn: fp32
(no --amp), 2 images per GPU, SGD (momentum 0.9, weight decay 1e-4, foreach), GroupedBatchSampler
with --aspect-ratio-group-factor 3, and the model's GeneralizedRCNNTransform with multi-scale
training (min_size a tuple, as Detectron2's (640..800) schedule; max_size 1333).

Images: COCO-like originals with the long side at most 640 and aspect ratios from a mixture of
4:3, 3:2, 16:9, square and portrait shapes (an assumption); per batch one aspect-ratio group
(the sampler's seven bins from 1:2 to 2:1), two images drawn from it. Per image: the number of
ground-truth instances G (log-normal, median 4.5, at most G_MAX: COCO's images have 7.3 on average),
each with a box, a label and a uint8 mask at the original size.

A training step:
* the images (fp32 [3,h,w]) and targets (boxes, labels, uint8 masks [G,h,w], area, iscrowd) sent to
  the device, held by the loop's variables until the next step;
* GeneralizedRCNNTransform: per image the normalized copy, the resize (to a short side drawn from
  MIN_SIZES, the long side at most 1333) of the image and of its masks (`mask[:, None].float()`,
  interpolate, `.byte()`), the resized boxes; `batch_images` pads the batch to the largest height and
  width, each rounded up to 32;
* the backbone, ResNet-50 with FrozenBatchNorm2d and trainable_backbone_layers=3: the stem and layer1
  frozen, run without a graph (their temporaries freed at once); layer2..layer4 modelled per
  bottleneck block: the conv outputs and FrozenBN's `x * scale` dropped, each ReLU's output saved
  (by the ReLU and the next conv), the downsample's identity added in place; cuDNN's workspace per
  conv (cudnn.benchmark is not set: a workspace from the heuristics, here a fixed share per layer of
  the output's bytes, none for 30% of them; an assumption);
* the FPN on layer1..layer4 (256 channels, nearest top-down interpolation, P6 by max-pool);
* the RPN: its head per level (3x3 conv, objectness and box deltas), the anchors per level and per
  image, decode, filter_proposals (top 2000 per level, per image clip, small-box and score filters,
  batched_nms with its [n, n/64] int64 mask, at most 2000 kept: the count kept is data-dependent),
  the loss: per image box_iou of the G ground-truth boxes against every anchor ([G, A] fp32, its
  [G, A, 2] corner temporaries), the matcher, 256 anchors sampled, box encoding;
* the ROI heads: proposals + ground truth, box_iou and matching, 512 sampled per image of which at
  most 128 positive (data-dependent), MultiScaleRoIAlign 7x7 on P2..P5 per level, TwoMLPHead
  (12544 -> 1024 -> 1024), the predictor, fastrcnn_loss; the mask branch on the positives: RoIAlign
  14x14, four 3x3 convs, the transposed conv to 28x28, the mask logits [P, 91, 28, 28];
  maskrcnn_loss projecting each image's masks on its proposals (`gt_masks[:, None].to(rois)`: an fp32
  copy [G,1,H,W] of the resized masks), binary cross-entropy on each positive's class;
* `optimizer.zero_grad()` after the forward, before `losses.backward()`, as the reference does; the
  backward in reverse: heads, the gradients of P2..P6 accumulated from the mask, box and RPN heads
  (RoIAlign's backward makes a full level-sized gradient), the FPN, the backbone blocks; every
  parameter's `.grad`; SGD's weight-decay temporaries, momentum buffers from the first step.

Parameters: 44.4 M, 23 trainable coarse tensors (a backbone block, an FPN level, the RPN head, fc6,
fc7, the predictor, the mask head, the mask predictor) and the frozen stem, layer1 and FrozenBN
buffers. One stream: the reference runs everything on the default stream.

An epoch of COCO train2017 on 8 GPUs is 7,330 steps, so the default run stays in the first (the
reference's evaluation runs after each epoch).

Warm-up: two steps at the extremes: two 640x640 images (the largest originals), then two 640x384
images (the largest resized and padded batch, 1344x800; the first step's momentum buffers live),
each with G_MAX instances, every candidate kept by the NMS, 2000 proposals and 128 positives per
image; every later draw lies within them.
"""
import math

FAMILY = "detection"
DESCRIPTION = ("Mask R-CNN R50-FPN training (torchvision detection reference, fp32, SGD momentum): multi-scale "
               "resize, padded batches, FPN, RPN/NMS and ROI tensors sized by proposals and ground truth")
DEFAULT_STEPS = 5000

BATCH = 2
MIN_SIZES = (640, 672, 704, 736, 768, 800)
MAX_SIZE = 1333
DIVISIBLE = 32
G_MAX = 60
PRE_NMS, POST_NMS = 2000, 2000
RPN_BATCH = 256
ROI_BATCH, ROI_POS = 512, 128
CLASSES = 91
FPN_CH = 256
# ResNet-50 layer2..layer4: (blocks, mid channels, out channels, stride of the first block)
LAYERS = ((4, 128, 512, 2), (6, 256, 1024, 2), (3, 512, 2048, 2))
WS_NONE, WS_MIN, WS_MAX = 0.3, 0.25, 2.0
# aspect ratio w/h of COCO-like originals: (value or (low, high), weight)
ASPECTS = ((4 / 3, 40), (1.5, 15), (16 / 9, 5), ((1.0, 2.0), 12), (1.0, 5), (0.75, 15), (2 / 3, 5), ((0.5, 1.0), 3))


def _bins():
    """GroupedBatchSampler's bins for --aspect-ratio-group-factor 3: 2**linspace(-1, 1, 7)."""
    return [2 ** (-1 + i / 3) for i in range(7)]


def _group(ar):
    return sum(1 for b in _bins() if ar >= b)


def _draw_aspect(rng):
    total = sum(w for _, w in ASPECTS)
    x = rng.random() * total
    for v, w in ASPECTS:
        x -= w
        if x <= 0:
            break
    return rng.uniform(*v) if isinstance(v, tuple) else v


def _original(rng, ar):
    """(h, w) of an original image with aspect w/h = ar, its long side 640 (mostly) or less."""
    long_side = 640 if rng.random() < 0.9 else rng.randint(480, 640)
    if ar >= 1:
        return max(1, round(long_side / ar)), long_side
    return long_side, max(1, round(long_side * ar))


def _resized(h, w, s):
    scale = min(s / min(h, w), MAX_SIZE / max(h, w))
    return int(math.floor(h * scale)), int(math.floor(w * scale))


def _ceil_div(a, b):
    return -(-a // b)


class _Model:
    def __init__(self, rec, rng):
        self.rec, self.rng = rec, rng
        t = rec.tensor
        self.pcount = []
        cin = 256
        self.blocks = []                                        # (mid, out, cin, stride)
        for n, mid, out, stride in LAYERS:
            for b in range(n):
                s = stride if b == 0 else 1
                self.blocks.append((mid, out, cin, s))
                self.pcount.append(cin * mid + 9 * mid * mid + mid * out + (cin * out if b == 0 else 0))
                cin = out
        self.p_fpn = len(self.pcount)
        for c in (256, 512, 1024, 2048):
            self.pcount.append(c * FPN_CH + FPN_CH + 9 * FPN_CH * FPN_CH + FPN_CH)
        self.p_rpn = len(self.pcount)
        self.pcount.append(9 * FPN_CH * FPN_CH + FPN_CH + 15 * FPN_CH + 15)
        self.p_fc6 = len(self.pcount)
        self.pcount += [FPN_CH * 49 * 1024 + 1024, 1024 * 1024 + 1024, 1024 * CLASSES * 5 + CLASSES * 5]
        self.p_mask = len(self.pcount)
        self.pcount += [4 * (9 * FPN_CH * FPN_CH + FPN_CH), FPN_CH * FPN_CH * 4 + FPN_CH + FPN_CH * CLASSES + CLASSES]
        self.params = [t(n, "fp32") for n in self.pcount]
        self.frozen = [t(9408 + 215_808, "fp32"), t(4 * 26_560, "fp32")]   # stem + layer1; FrozenBN buffers
        self.ws = {}
        self.grads = None
        self.momentum = None
        self.held = []                                          # the loop's images and targets

    # ---- helpers ----
    def _a(self, nbytes):
        return self.rec.alloc(nbytes)

    def _workspace(self, key, out_bytes):
        f = self.ws.get(key)
        if f is None:
            rng = self.rng
            f = 0.0 if rng.random() < WS_NONE else math.exp(rng.uniform(math.log(WS_MIN), math.log(WS_MAX)))
            self.ws[key] = f
        if f:
            self.rec.free(self.rec.alloc(int(out_bytes * f)))

    def _grad(self, p):
        self.grads[p] = self.rec.alloc(4 * self.pcount[p])

    # ---- backbone ----
    def _frozen(self, B, Hp, Wp):
        """conv1, FrozenBN, ReLU, max-pool and layer1, without a graph; returns C2."""
        a, free = self._a, self.rec.free
        s1 = (Hp // 2) * (Wp // 2)
        c = a(4 * B * 64 * s1)
        self._workspace(("stem",), 4 * B * 64 * s1)
        m = a(4 * B * 64 * s1)                                  # x * scale
        free(c)
        y = a(4 * B * 64 * s1)                                  # + bias, relu_
        free(m)
        s2 = s1 // 4
        mp = a(4 * B * 64 * s2)
        idx = a(8 * B * 64 * s2)                                # max_pool2d_with_indices, indices dropped
        free(idx)
        free(y)
        h = mp
        for b in range(3):                                      # layer1: 64 -> 256 at 1/4
            t = a(4 * B * (64 * 3 + 256) * s2)                  # its convs' and FrozenBN's temporaries
            self._workspace(("layer1", b), 4 * B * 64 * s2)
            o = a(4 * B * 256 * s2)
            free(t)
            free(h)
            h = o
        return h

    def _block_fwd(self, i, B, S_in):
        a, free = self._a, self.rec.free
        mid, out, cin, s = self.blocks[i]
        S = S_in // (s * s)
        sv = {}
        t = a(4 * B * mid * S_in * 2)                           # conv1's output and FrozenBN's x * scale
        sv["r12"] = a(4 * B * mid * (S_in + S))                 # the ReLU outputs of conv1 and conv2, saved
        free(t)
        self._workspace((i, "fwd"), 4 * B * mid * S)
        t3 = a(4 * B * out * S * 2)                             # conv3's output and x * scale
        idn = a(4 * B * out * S) if s != 1 or cin != out else None   # the downsample's identity
        sv["r3"] = a(4 * B * out * S)                           # + bias, += identity, relu_: saved
        free(t3)
        if idn is not None:
            free(idn)
        return sv, sv["r3"], S

    def _block_bwd(self, i, B, S_in, sv, g):
        """Returns the gradient of the block's input (None for layer2's first: layer1 is frozen)."""
        a, free = self._a, self.rec.free
        mid, out, cin, s = self.blocks[i]
        S = S_in // (s * s)
        need_input = i > 0
        self._grad(i)
        g3 = a(4 * B * out * S)                                 # ReLU's and FrozenBN's backward
        free(g)
        free(sv["r3"])
        ds = s != 1 or cin != out
        gd = a(4 * B * cin * S_in) if ds and need_input else None   # the downsample conv's grad input
        gx = a(4 * B * mid * S_in)                              # conv3 -> conv2 -> conv1's grads
        self._workspace((i, "bwd"), 4 * B * mid * S_in)
        free(sv["r12"])
        if need_input:
            gi = a(4 * B * cin * S_in)                          # conv1's grad input
            free(gi)                                            # added in place to the identity's grad
        free(gx)
        if ds:
            free(g3)
            return gd
        return g3

    # ---- FPN ----
    def _fpn_fwd(self, B, C, S):
        """C, S: layer1..layer4 outputs and their sizes; returns (P2..P6, saved)."""
        a, free = self._a, self.rec.free
        P = [None] * 5
        li = [None] * 4
        for l in (3, 2, 1, 0):
            lat = a(4 * B * FPN_CH * S[l])                      # inner_blocks[l](C_l)
            if l == 3:
                li[l] = lat
            else:
                td = a(4 * B * FPN_CH * S[l])                   # F.interpolate(last_inner, nearest)
                li[l] = a(4 * B * FPN_CH * S[l])                # lateral + top-down
                free(lat)
                free(td)
            P[l] = a(4 * B * FPN_CH * S[l])                     # layer_blocks[l](last_inner)
            self._workspace(("fpn", l), 4 * B * FPN_CH * S[l])
        s6 = S[4]
        P[4] = a(4 * B * FPN_CH * s6)                           # max_pool2d(P5, 1, 2, 0)
        idx = a(8 * B * FPN_CH * s6)
        return P, {"li": li, "idx": idx}

    def _fpn_bwd(self, B, S, sv, gP):
        """Returns the gradients of layer2..layer4's outputs (C3..C5)."""
        a, free = self._a, self.rec.free
        g5 = a(4 * B * FPN_CH * S[3])                           # max-pool's backward into P5's gradient
        free(gP[4])
        free(sv["idx"])
        free(g5)                                                # accumulated in place
        gC = [None] * 4
        g_up = None
        for l in (0, 1, 2, 3):                                  # P2's conv was made last
            gli = a(4 * B * FPN_CH * S[l])                      # layer_blocks[l]'s grad input
            self._workspace(("fpn", l, "bwd"), 4 * B * FPN_CH * S[l])
            self._grad(self.p_fpn + l)
            free(gP[l])
            free(sv["li"][l])
            if g_up is not None:
                free(g_up)                                      # accumulated in place
            if l > 0:
                gC[l] = a(4 * B * (256 << l) * S[l])            # inner_blocks[l]'s grad input
            if l < 3:
                g_up = a(4 * B * FPN_CH * S[l + 1])             # interpolate's backward
            free(gli)
        return gC

    # ---- RPN ----
    def _rpn(self, B, S, images):
        """The RPN's forward and loss; returns (saved, proposals per image as (ids, K), A)."""
        rec, a, free = self.rec, self._a, self.rec.free
        A = 3 * sum(S)
        sv = {"t": [], "o": []}
        for l in range(5):
            sv["t"].append(a(4 * B * FPN_CH * S[l]))            # conv3x3 + relu_, saved by both heads
            self._workspace(("rpn", l), 4 * B * FPN_CH * S[l])
            sv["o"].append(a(4 * B * 15 * S[l]))                # objectness [B,3,...], deltas [B,12,...]
        lv = [a(4 * 4 * 3 * S[l]) for l in range(5)]            # grid_anchors per level
        anchors = [a(4 * 4 * A) for _ in range(B)]              # torch.cat per image
        rec.free_all(lv)
        flat = a(4 * B * A * 5)                                 # concat_box_prediction_layers
        dec = a(4 * B * A * 4 * 3)                              # box_coder.decode temporaries
        props = a(4 * B * A * 4)
        free(dec)
        # filter_proposals
        ncand = sum(min(PRE_NMS, 3 * S[l]) for l in range(5))
        levels = a(8 * B * A)
        top = a(8 * B * ncand)                                  # _get_top_n_idx
        sel = a(4 * B * ncand * 6)                              # objectness, levels, proposals gathered
        free(levels)
        out = []
        for img in images:
            n = ncand
            clip = a(4 * n * 4)
            keep = a(8 * n)                                     # remove_small_boxes, score_thresh
            off = a(4 * n * 4)                                  # batched_nms: boxes + idxs * max
            order = a(8 * n)
            mask = a(8 * n * _ceil_div(n, 64))                  # nms_kernel's mask
            free(order)
            free(mask)
            kept = a(8 * img["K_nms"])
            free(off)
            K = img["K"]
            boxes = a(4 * K * 4)
            scores = a(4 * K)
            rec.free_all((kept, keep, clip))
            out.append((boxes, scores, K))
        rec.free_all((top, sel, props))
        # the loss: assign_targets_to_anchors, sample, encode
        tgt = []
        for img, anc in zip(images, anchors):
            G = img["G"]
            tmp = a(4 * G * A * 2 * 3)                          # box_iou's lt, rb, wh
            iou = a(4 * G * A)
            free(tmp)
            mt = a(8 * A + 4 * A)                               # matched_vals, matches
            lq = a(G * A + 4 * G + 16 * G * 4)                  # == highest per gt (bool), nonzero
            free(lq)
            free(iou)
            mgt = a(4 * A * 4)                                  # matched gt boxes
            lab = a(4 * A + 2 * A)                              # labels, bg/discard masks
            enc = a(4 * A * 4 * 2)
            reg = a(4 * A * 4)                                  # regression targets
            rec.free_all((enc, mgt, mt))
            smp = a(8 * img["rpn_pos"] + 8 * (RPN_BATCH - img["rpn_pos"]) + 2 * A)   # where, randperm, masks
            tgt.append((lab, reg, smp))
        npos = sum(img["rpn_pos"] for img in images)
        idx = a(8 * BATCH * RPN_BATCH)
        gd, gt_ = a(4 * npos * 4), a(4 * npos * 4)              # deltas and targets of the positives
        gl = a(4 * BATCH * RPN_BATCH * 2)                       # objectness and labels of the sampled
        losses = [a(4), a(4)]
        for t3 in tgt:
            rec.free_all(t3)
        rec.free_all(anchors)
        rec.free_all(sv.pop("o"))                               # the heads' outputs: only gathered parts saved
        free(flat)
        sv.update(saved=[gd, gt_, gl, idx], A=A)
        return sv, out, losses

    def _rpn_bwd(self, B, S, sv, gP):
        rec, a, free = self.rec, self._a, self.rec.free
        A = sv["A"]
        go = a(4 * B * A * 5)                                   # index backward: zeros + index_put
        self._grad(self.p_rpn)
        for l in (4, 3, 2, 1, 0):
            gl = a(4 * B * 15 * S[l])                           # permute backward, made contiguous for the conv
            gt = a(4 * B * FPN_CH * S[l])                       # the two heads' grads, relu's backward
            free(gl)
            free(sv["t"][l])
            g = a(4 * B * FPN_CH * S[l])                        # conv3x3's grad input
            self._workspace(("rpn", l, "bwd"), 4 * B * FPN_CH * S[l])
            free(gt)
            if gP[l] is None:
                gP[l] = g
            else:
                free(g)                                         # added in place into P_l's gradient
        free(go)
        rec.free_all(sv["saved"])

    # ---- ROI heads ----
    def _roi(self, B, S, images, props):
        rec, a, free = self.rec, self._a, self.rec.free
        R = ROI_BATCH * B
        samp = []
        for img, (boxes, scores, K) in zip(images, props):
            G = img["G"]
            cat = a(4 * (K + G) * 4)                            # proposals + gt boxes
            tmp = a(4 * G * (K + G) * 2 * 3)
            iou = a(4 * G * (K + G))
            free(tmp)
            mt = a(12 * (K + G))
            free(iou)
            sel = a(8 * ROI_BATCH * 3 + 4 * ROI_BATCH * 4 * 2)  # sampled idx, labels, matched idx, boxes, targets
            free(mt)
            free(cat)
            rec.free_all((boxes, scores))
            samp.append(sel)
        rois = a(4 * R * 5)                                     # convert_to_roi_format
        lvl = a(8 * R + 4 * R * 3)                              # LevelMapper
        feat = a(4 * R * FPN_CH * 49)                           # result, zeros
        for l in range(4):
            part = a(8 * R // 4)                                # where(levels == l), rois of the level
            o = a(4 * (R // 4) * FPN_CH * 49)
            free(o)                                             # result[idx] = o
            free(part)
        free(lvl)
        fc6 = a(4 * R * 1024)                                   # relu_ on it: saved
        fc7 = a(4 * R * 1024)
        pred = a(4 * R * CLASSES * 5)                           # class logits, box regression
        lab = a(8 * R + 4 * R * 4)
        lsm = a(4 * R * CLASSES)                                # cross_entropy's log_softmax, saved
        free(pred)                                              # only the log_softmax and gathers are saved
        npos = sum(img["pos"] for img in images)
        pidx = a(8 * npos)
        reg = a(4 * npos * 4 * 2)
        losses = [a(4), a(4)]
        free(reg)
        # the mask branch on the positives
        Pn = npos
        mrois = a(4 * Pn * 5 + 8 * Pn)
        mfeat = a(4 * Pn * FPN_CH * 196)                        # MultiScaleRoIAlign 14x14
        for l in range(4):
            o = a(4 * _ceil_div(Pn, 4) * FPN_CH * 196)
            free(o)
        mh = a(4 * Pn * FPN_CH * 196 * 4)                       # the four conv + relu outputs, saved
        self._workspace(("mask",), 4 * Pn * FPN_CH * 196)
        dc = a(4 * Pn * FPN_CH * 784)                           # ConvTranspose2d + relu
        ml = a(4 * Pn * CLASSES * 784)                          # mask logits
        tparts = []
        for img in images:
            G, H, W = img["G"], img["H"], img["W"]
            cp = a(4 * G * H * W)                               # gt_masks[:, None].to(rois)
            tparts.append(a(4 * img["pos"] * 784))              # roi_align(..., (28, 28))
            free(cp)
        mt = a(4 * Pn * 784)                                    # torch.cat(mask_targets)
        rec.free_all(tparts)
        sel = a(4 * Pn * 784)                                   # mask_logits[arange, labels]
        free(ml)
        losses.append(a(4))
        sv = dict(samp=samp, rois=rois, feat=feat, fc6=fc6, fc7=fc7, lab=lab, lsm=lsm, pidx=pidx,
                  mrois=mrois, mfeat=mfeat, mh=mh, dc=dc, mt=mt, sel=sel, R=R, Pn=Pn)
        return sv, losses

    def _roi_bwd(self, B, S, sv, gP):
        """The mask branch, then the box head; RoIAlign's backward makes level-sized gradients, the
        first of each level kept as P_l's gradient, the later added in place."""
        rec, a, free = self.rec, self._a, self.rec.free
        R, Pn = sv["R"], sv["Pn"]
        g = a(4 * Pn * 784)                                     # BCE's backward
        free(sv["sel"])
        free(sv["mt"])
        gl = a(4 * Pn * CLASSES * 784)                          # index backward into the logits
        free(g)
        self._grad(self.p_mask + 1)
        gd = a(4 * Pn * FPN_CH * 784)
        free(gl)
        free(sv["dc"])
        gh = a(4 * Pn * FPN_CH * 196 * 2)                       # the conv stack's grads
        free(gd)
        self._workspace(("mask", "bwd"), 4 * Pn * FPN_CH * 196)
        self._grad(self.p_mask)
        free(sv["mh"])
        gm = a(4 * Pn * FPN_CH * 196)
        free(gh)
        for l in range(4):
            gx = a(4 * B * FPN_CH * S[l])                       # roi_align's backward: zeros + scatter
            if gP[l] is None:
                gP[l] = gx
            else:
                free(gx)
        free(gm)
        free(sv["mfeat"])
        free(sv["mrois"])
        # fastrcnn_loss and the box head
        gp = a(4 * R * CLASSES * 5)
        free(sv["lsm"])
        free(sv["pidx"])
        self._grad(self.p_fc6 + 2)
        g7 = a(4 * R * 1024)
        free(gp)
        self._grad(self.p_fc6 + 1)
        g6 = a(4 * R * 1024)
        free(g7)
        free(sv["fc7"])
        self._grad(self.p_fc6)
        gf = a(4 * R * FPN_CH * 49)
        free(g6)
        free(sv["fc6"])
        free(sv["feat"])
        for l in range(4):
            gx = a(4 * B * FPN_CH * S[l])
            if gP[l] is None:
                gP[l] = gx
            else:
                free(gx)
        free(gf)
        free(sv["rois"])
        free(sv["lab"])
        rec.free_all(sv["samp"])

    # ---- a step ----
    def step(self, images):
        rec, a, free = self.rec, self._a, self.rec.free
        B = len(images)
        # the batch sent to the device; the loop drops the previous one
        held = []
        for img in images:
            h0, w0, G = img["h0"], img["w0"], img["G"]
            held += [a(4 * 3 * h0 * w0), a(4 * G * 4), a(8 * G), a(G * h0 * w0), a(8), a(4 * G), a(8 * G)]
        rec.free_all(self.held)
        self.held = held
        # GeneralizedRCNNTransform
        rs, masks_rs = [], []
        for img in images:
            h0, w0, G, H, W = img["h0"], img["w0"], img["G"], img["H"], img["W"]
            ms = [a(4 * 3), a(4 * 3)]                           # mean, std as tensors
            sub = a(4 * 3 * h0 * w0)
            nrm = a(4 * 3 * h0 * w0)
            free(sub)
            rec.free_all(ms)
            im = a(4 * 3 * H * W)                               # interpolate
            free(nrm)
            mf = a(4 * G * h0 * w0)                             # mask[:, None].float()
            mi = a(4 * G * H * W)
            free(mf)
            mb = a(G * H * W)                                   # .byte()
            free(mi)
            bx = a(4 * G * 4 + 4 * 2)                           # resize_boxes: ratios, new boxes
            rs.append(im)
            masks_rs.append((mb, bx))
        Hp = max(i["H"] for i in images)
        Wp = max(i["W"] for i in images)
        Hp, Wp = _ceil_div(Hp, DIVISIBLE) * DIVISIBLE, _ceil_div(Wp, DIVISIBLE) * DIVISIBLE
        x = a(4 * B * 3 * Hp * Wp)                              # new_full(batch_shape, 0), copies
        rec.free_all(rs)
        # backbone
        S = [(Hp >> k) * (Wp >> k) for k in (2, 3, 4, 5)]
        S.append(_ceil_div(Hp >> 5, 2) * _ceil_div(Wp >> 5, 2))
        C = [self._frozen(B, Hp, Wp)]                           # the frozen part saves nothing of x
        saved = []
        h, s_in = C[0], S[0]
        bi = 0
        for n, _, _, _ in LAYERS:
            for _ in range(n):
                sv, h, s_out = self._block_fwd(bi, B, s_in)
                saved.append((bi, s_in, sv))
                s_in = s_out
                bi += 1
            C.append(h)
        P, fsv = self._fpn_fwd(B, C, S)
        rsv, props, l_rpn = self._rpn(B, S, images)
        roisv, l_roi = self._roi(B, S, images, props)
        total = a(4 * 3)                                        # sum(losses), reduce_dict's stack
        free(x)                                                 # the ImageList, dropped as forward returns
        # zero_grad(set_to_none=True), then losses.backward()
        if self.grads:
            rec.free_all(self.grads.values())
        self.grads = {}
        gP = [None] * 5
        self._roi_bwd(B, S, roisv, gP)
        self._rpn_bwd(B, S, rsv, gP)
        rec.free_all(P)                                         # saved by the RPN head's conv (P5 by max-pool)
        gC = self._fpn_bwd(B, S, fsv, gP)
        g = gC[3]
        layer_end = []
        acc = 0
        for n, _, _, _ in LAYERS:
            acc += n
            layer_end.append(acc - 1)
        for bi, s_in, sv in reversed(saved):
            if bi in layer_end[:-1]:                            # the FPN's gradient of this output first
                li = layer_end.index(bi) + 1
                free(g)                                         # added in place
                g = gC[li]
            g = self._block_bwd(bi, B, s_in, sv, g)
        free(C[0])                                              # layer1's output, saved by layer2's first block
        rec.free_all(l_rpn + l_roi + [total])
        for mb, bx in masks_rs:
            rec.free_all((mb, bx))
        self._sgd()

    def _sgd(self):
        rec = self.rec
        n = len(self.pcount)
        wd = [rec.alloc(4 * self.pcount[i]) for i in range(n)]  # _foreach_add(grads, params, alpha=wd)
        if self.momentum is None:
            self.momentum = [rec.alloc(4 * self.pcount[i]) for i in range(n)]
        rec.free_all(wd)


def _draw_images(rng):
    """Two images of one aspect-ratio group, with their instance counts and proposal counts."""
    ar = _draw_aspect(rng)
    g = _group(ar)
    out = []
    for i in range(BATCH):
        a = ar
        if i:
            for _ in range(50):                                 # another image of the same group
                a = _draw_aspect(rng)
                if _group(a) == g:
                    break
            else:
                a = ar
        h0, w0 = _original(rng, a)
        G = min(G_MAX, max(1, int(round(math.exp(rng.gauss(1.5, 0.9))))))
        out.append(_image(rng, h0, w0, G))
    return out


def _image(rng, h0, w0, G, extreme=False):
    """An image's sizes and data-dependent counts: its resized size, the share of candidates NMS keeps
    (an assumption: 15% to 50%), positives among the ROI heads' 512 (the ground truth boxes and a few
    proposals per instance) and among the RPN's 256 anchors. The extreme: every count at its bound."""
    s = MIN_SIZES[-1] if extreme else rng.choice(MIN_SIZES)
    H, W = _resized(h0, w0, s)
    img = {"h0": h0, "w0": w0, "G": G, "H": H, "W": W}
    if extreme:
        img.update(frac=1.0, pos=ROI_POS, rpn_pos=RPN_BATCH // 2)
    else:
        img.update(frac=rng.uniform(0.15, 0.5), pos=min(ROI_POS, G + int(round(G * rng.uniform(2, 15)))),
                   rpn_pos=min(RPN_BATCH // 2, int(round(G * rng.uniform(3, 12))) + 1))
    return img


def _finish(images):
    """Proposal counts: the NMS keeps a share of the batch's top-n candidates, at most POST_NMS."""
    Hp = _ceil_div(max(i["H"] for i in images), DIVISIBLE) * DIVISIBLE
    Wp = _ceil_div(max(i["W"] for i in images), DIVISIBLE) * DIVISIBLE
    S = [(Hp >> k) * (Wp >> k) for k in (2, 3, 4, 5)] + [_ceil_div(Hp >> 5, 2) * _ceil_div(Wp >> 5, 2)]
    ncand = sum(min(PRE_NMS, 3 * s) for s in S)
    for img in images:
        img["K_nms"] = max(1, int(ncand * img["frac"]))
        img["K"] = min(POST_NMS, img["K_nms"])
    return images


def generate(rec, rng, steps):
    m = _Model(rec, rng)
    # the largest originals, then (momentum buffers live from the first step on) the largest batch
    warm = [[_image(rng, 640, 640, G_MAX, True) for _ in range(BATCH)],
            [_image(rng, 384, 640, G_MAX, True) for _ in range(BATCH)]]
    for i in range(steps):
        images = _finish(warm[i] if i < len(warm) else _draw_images(rng))
        rec.step()
        m.step(images)
        if i + 1 == len(warm):
            rec.warmup_done()
    rec.warmup_done()
