"""Graph classification training on mini-batches of variable-size graphs, modelled on OGB's
ogbg-ppa example (examples/graphproppred/ppa/main_pyg.py, its `gin-virtual` model: GNN_node_Virtualnode
with OGB's GINConv) fed by PyTorch Geometric's DataLoader (Batch.from_data_list) through
torch_geometric.loader.PrefetchLoader.

Graphs: ogbg-ppa-like protein association neighbourhoods: 50 to 300 nodes (300 minus a half-normal
draw, mean about 240; ppa's average is 243.4), each node with about 18.6 directed edges on average
(ppa: 2,266 undirected edges per graph, both directions loaded), the graph's mean degree drawn from
a normal of standard deviation 6 bounded to [4, 40] (the spread is an assumption). A batch is 32
graphs: N nodes and E edges summed over them.

The batch (stream 1): PrefetchLoader copies batch k+1 to the device on a side stream while batch k
computes: x (int64 [N], ppa's all-zero node features), edge_index (int64 [2, E]), edge_attr (fp32
[E, 7]), y (int64 [32, 1]), batch (int64 [N]), ptr (int64 [33]); batch k-1 is freed when the loop
rebinds its variable.

The model (fp32, emb_dim 300, 5 layers, dropout 0.5, JK last, mean pooling, 37 classes):
* a virtual node: `virtualnode_embedding(zeros(B))`, and per layer `h + vn[batch]` (index_select
  [N, 300]);
* GINConv per layer: `edge_encoder(edge_attr)` [E, 300]; propagate: `x.index_select(0, src)`
  [E, 300], message `relu(x_j + edge_attr)` [E, 300] (saved by the ReLU: the per-edge tensor the
  backward keeps), scatter-sum into a zeroed [N, 300]; `(1 + eps) * x + aggr`; the MLP Linear(300,
  600), BatchNorm1d, ReLU, Linear(600, 300); then the layer's BatchNorm1d, ReLU (not after the last)
  and dropout (a bool mask and the output);
* between layers the virtual node's update: global_add_pool [32, 300], its MLP (600 wide, BatchNorm,
  ReLU, dropout);
* global_mean_pool, the linear head [32, 37], cross-entropy;
* `optimizer.zero_grad()` after the forward, as OGB's loop does; the backward in reverse: per layer
  the dropout, BN, ReLU and Linear gradients ([N, 300] and [N, 600]), the scatter's backward (a
  gather into [E, 300]), the message ReLU's, index_select's backward (zeros [N, 300] and an
  index_add), the gradients of a layer's input accumulated in place from the virtual node's pool,
  the (1 + eps) product and the messages; each parameter's `.grad`; torch.optim.Adam (foreach:
  exp_avg and exp_avg_sq at the first step, `_foreach_sqrt` temporaries each step).
Parameters are kept coarse: per layer the GINConv's (edge encoder, eps, MLP with its BatchNorm), the
layer's BatchNorm, the virtual-node MLP; the node encoder, the virtual-node embedding and the head.

Evaluation after each epoch (OGB's `eval`, here on the validation split only; OGB's script also
re-evaluates the training and test splits): under no_grad, every activation freed once used, the
argmax of the predictions. An epoch is TRAIN_GRAPHS graphs, the validation split VALID_GRAPHS (each
an assumption: about half and a fifth of ppa's 158,100 graphs).

Warm-up: the run's batches are drawn first; a batch at their bounds (32 graphs, the largest node
count and the largest edge count among them), as a program does that probes its largest batch
first to fail fast, checks the eval path (as PyTorch Lightning's sanity check does), then is the
first two training batches, the second the first with Adam's state live.
"""
import math

FAMILY = "graph_network"
DESCRIPTION = ("OGB ogbg-ppa GIN with virtual node (PyG DataLoader batches of 32 variable-size graphs, "
               "prefetch stream): per-edge messages, scatter aggregation, 5 layers, Adam; eval per epoch")
DEFAULT_STEPS = 5000

DATA_STREAM = 1
BATCH = 32
D = 300
LAYERS = 5
CLASSES = 37
EDGE_DIM = 7
MIN_NODES, MAX_NODES = 50, 300
MEAN_DEG, SD_DEG, MIN_DEG, MAX_DEG = 18.6, 6.0, 4, 40
TRAIN_GRAPHS, VALID_GRAPHS = 79000, 31600


def _draw_graph(rng):
    n = int(MAX_NODES - abs(rng.gauss(0, 75)))
    n = max(MIN_NODES, min(MAX_NODES, n))
    d = max(MIN_DEG, min(MAX_DEG, rng.gauss(MEAN_DEG, SD_DEG)))
    return n, 2 * int(n * d / 2)


def _batch(rng, graphs=BATCH):
    N = E = 0
    for _ in range(graphs):
        n, e = _draw_graph(rng)
        N += n
        E += e
    return graphs, N, E


class _GNN:
    def __init__(self, rec):
        self.rec = rec
        conv = EDGE_DIM * D + D + 1 + D * 2 * D + 2 * D + 4 * D + 2 * D * D + D   # edge encoder, eps, MLP + BN
        bn = 2 * D
        vn = D * 2 * D + 2 * D + 4 * D + 2 * D * D + D + 2 * D                     # the virtual node's MLP
        self.pcount = [D, D]                                    # node encoder (Embedding(1, 300)), vn embedding
        self.p_layer = []
        for layer in range(LAYERS):
            self.p_layer.append(len(self.pcount))
            self.pcount += [conv, bn] + ([vn] if layer < LAYERS - 1 else [])
        self.p_head = len(self.pcount)
        self.pcount.append(D * CLASSES + CLASSES)
        self.params = [rec.tensor(n, "fp32") for n in self.pcount]
        self.buffers = [rec.tensor(2 * 2 * D, "fp32") for _ in range(2 * LAYERS)]   # BN running stats
        self.grads = None
        self.adam = None

    def _a(self, nbytes):
        return self.rec.alloc(nbytes)

    def _grad(self, p):
        if p not in self.grads:
            self.grads[p] = self.rec.alloc(4 * self.pcount[p])

    def train_step(self, B, N, E):
        rec, a, free = self.rec, self._a, self.rec.free
        nd, ed = 4 * N * D, 4 * E * D
        # ---- forward ----
        z = a(8 * B)                                            # torch.zeros(batch[-1] + 1) sent to the device
        vn = a(4 * B * D)                                       # virtualnode_embedding(...)
        free(z)
        h = a(nd)                                               # node_encoder(x)
        saved = []
        for layer in range(LAYERS):
            last = layer == LAYERS - 1
            s = {}
            vi = a(nd)                                          # vn[batch]
            s["h"] = a(nd)                                      # h + vn[batch]: saved by (1 + eps) * x
            free(vi)
            free(h)
            ee = a(ed)                                          # edge_encoder(edge_attr)
            xj = a(ed)                                          # x.index_select(0, edge_index[0])
            ms = a(ed)                                          # x_j + edge_attr
            free(xj)
            s["msg"] = a(ed)                                    # relu(): saved
            free(ms)
            agg = a(nd)                                         # scatter(..., reduce="sum")
            free(ee)
            ex = a(nd)                                          # (1 + eps) * x
            s["s"] = a(nd)                                      # + aggr: saved by Linear(300, 600)
            free(ex)
            free(agg)
            s["l1"] = a(2 * nd)                                 # saved by BatchNorm1d
            s["st1"] = a(2 * 2 * 4 * D)                         # save_mean, save_invstd
            b1 = a(2 * nd)
            s["r1"] = a(2 * nd)                                 # ReLU: saved by Linear(600, 300)
            free(b1)
            s["l2"] = a(nd)                                     # saved by the layer's BatchNorm1d
            s["st2"] = a(2 * 4 * D)
            b2 = a(nd)
            if not last:
                s["r2"] = a(nd)                                 # ReLU: saved
                free(b2)
            s["mask"] = a(N * D)                                # dropout's bool mask
            h = a(nd)
            if last:
                free(b2)
            if not last:                                        # the virtual node's update
                pool = a(4 * B * D)                             # global_add_pool(h_list[layer], batch)
                s["vn"] = a(4 * B * (D + 2 * D * 2 + D * 2) + B * D + 4 * 4 * 3 * D)   # its MLP's saved
                free(pool)
                nvn = a(4 * B * D)
                free(vn)
                vn = nvn
            saved.append(s)
        free(vn)
        pool = a(4 * B * D + 4 * B)                             # global_mean_pool: sums, counts
        hg = a(4 * B * D)
        free(pool)
        free(h)                                                 # the node representation, dropped on return
        pred = a(4 * B * CLASSES)
        lsm = a(4 * B * CLASSES)                                # cross_entropy's log_softmax, saved
        loss = a(4)
        # ---- optimizer.zero_grad(), loss.backward() ----
        if self.grads:
            rec.free_all(self.grads.values())
        self.grads = {}
        gl = a(4 * B * CLASSES)
        free(lsm)
        self._grad(self.p_head)
        gh = a(4 * B * D)
        free(gl)
        free(hg)
        g = a(nd)                                               # global_mean_pool's backward: a gather
        free(gh)
        gvn = None
        for layer in reversed(range(LAYERS)):
            last = layer == LAYERS - 1
            s = saved[layer]
            pl = self.p_layer[layer]
            if not last:                                        # the virtual node's MLP and pool, made last
                free(s["vn"])
                self._grad(pl + 2)
                gt = a(4 * B * D)
                free(gvn)
                gp = a(nd)                                      # global_add_pool's backward: the first
                free(gt)                                        # gradient of this layer's input
            gd = a(nd)                                          # dropout's backward
            free(g)
            free(s["mask"])
            if not last:
                gr = a(nd)                                      # ReLU's backward
                free(gd)
                free(s["r2"])
                gd = gr
            gb = a(nd)                                          # BatchNorm1d's backward
            self._grad(pl + 1)
            free(gd)
            free(s["l2"])
            free(s["st2"])
            g2 = a(2 * nd)                                      # Linear(600, 300)'s grad input
            self._grad(pl)
            free(gb)
            free(s["r1"])
            gr1 = a(2 * nd)
            free(g2)
            gb1 = a(2 * nd)
            free(gr1)
            free(s["l1"])
            free(s["st1"])
            gs = a(nd)                                          # Linear(300, 600)'s grad input
            free(gb1)
            free(s["s"])
            gx = a(nd)                                          # (1 + eps) * x's backward
            ge = a(nd)                                          # eps's: (grad * x).sum()
            free(ge)
            gm = a(ed)                                          # the scatter's backward: gather [E, 300]
            free(gs)
            grm = a(ed)                                         # the message ReLU's backward
            free(gm)
            free(s["msg"])
            gj = a(nd)                                          # index_select's backward: zeros + index_add_
            free(grm)
            free(s["h"])
            if last:
                g = gx
            else:
                free(gx)                                        # added in place into gp
                g = gp
            free(gj)                                            # added in place
            gvn = a(4 * B * D)                                  # vn[batch]'s backward: zeros + index_add_
        free(gvn)
        self._grad(1)
        self._grad(0)                                           # the node encoder, reached last
        free(g)
        free(pred)
        free(loss)
        # ---- optimizer.step() ----
        if self.adam is None:
            self.adam = [a(4 * n) for n in self.pcount for _ in range(2)]
        sq = [a(4 * n) for n in self.pcount]                    # _foreach_sqrt(exp_avg_sqs)
        self.rec.free_all(sq)

    def eval_step(self, B, N, E):
        a, free = self._a, self.rec.free
        nd, ed = 4 * N * D, 4 * E * D
        z = a(8 * B)
        vn = a(4 * B * D)
        free(z)
        h = a(nd)
        for layer in range(LAYERS):
            last = layer == LAYERS - 1
            vi = a(nd)
            x = a(nd)
            free(vi)
            free(h)
            ee = a(ed)
            xj = a(ed)
            ms = a(ed)
            free(xj)
            free(ee)
            msg = a(ed)
            free(ms)
            agg = a(nd)
            free(msg)
            ex = a(nd)
            s = a(nd)
            free(ex)
            free(agg)
            l1 = a(2 * nd)
            b1 = a(2 * nd)
            free(l1)
            r1 = a(2 * nd)
            free(b1)
            l2 = a(nd)
            free(r1)
            free(s)
            h = a(nd)                                           # BatchNorm1d (eval: running stats)
            free(l2)
            if not last:
                r = a(nd)
                free(h)
                h = r
                pool = a(4 * B * D)
                t = a(4 * B * D * 4)                            # the virtual node's MLP
                free(pool)
                nvn = a(4 * B * D)
                free(t)
                free(vn)
                vn = nvn
            free(x)
        free(vn)
        pool = a(4 * B * D + 4 * B)
        hg = a(4 * B * D)
        free(pool)
        free(h)
        pred = a(4 * B * CLASSES)
        free(hg)
        am = a(8 * B)                                           # torch.argmax(pred, dim=1)
        free(am)
        free(pred)


def _pass(rec, net, batches, train, left, warm_after=None):
    """One pass of a loader through PrefetchLoader; returns the steps it ran."""
    def copy(B, N, E):
        return [rec.alloc(n, DATA_STREAM) for n in (8 * N, 8 * 2 * E, 4 * E * EDGE_DIM, 8 * B, 8 * N, 8 * (B + 1))]

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
        (net.train_step if train else net.eval_step)(*batches[j])
        if warm_after is not None and j + 1 == warm_after:
            rec.warmup_done()
    if n == len(batches):
        for k in sorted(held):
            rec.free_all(held.pop(k))
    return n


def _loader(rng, graphs):
    """A pass over `graphs` graphs in batches of 32 (the last partial): [(graphs, N, E)]."""
    out = []
    left = graphs
    while left > 0:
        b = min(BATCH, left)
        out.append(_batch(rng, b))
        left -= b
    return out


def generate(rec, rng, steps):
    net = _GNN(rec)
    # the run's passes drawn first: the warm-up's batch is at their largest node and edge counts
    plan, total = [], 1
    while total < steps:
        for phase, graphs in (("train", TRAIN_GRAPHS), ("eval", VALID_GRAPHS)):
            if total < steps:
                plan.append((phase, _loader(rng, graphs)))
                total += len(plan[-1][1])
    bound = (BATCH, max(N for _, p in plan for _, N, _ in p), max(E for _, p in plan for _, _, E in p))
    if plan:
        plan[0][1][:2] = [bound] * min(2, len(plan[0][1]))
    phases = []
    rec.extra["phases"] = phases
    done = 0
    phases.append([done, "eval"])
    done += _pass(rec, net, [bound], False, steps - done)
    for i, (phase, batches) in enumerate(plan):
        if done == steps:
            break
        phases.append([done, phase])
        done += _pass(rec, net, batches, phase == "train", steps - done, 2 if i == 0 else None)
    rec.warmup_done()
