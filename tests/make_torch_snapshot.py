"""Writes a small snapshot pickle in the structure of PyTorch's torch.cuda.memory._snapshot() (the
fields tools/torch_snapshot_to_csv.py reads), without PyTorch: three allocations, one left live, one
free that completes later, segment events that the converter skips."""
import pickle
import sys

trace = [
    {"action": "segment_alloc", "addr": 1 << 30, "size": 2 << 20, "stream": 0},
    {"action": "alloc", "addr": 1 << 30, "size": 4096, "stream": 0},
    {"action": "alloc", "addr": (1 << 30) + 4096, "size": 1 << 20, "stream": 0},
    {"action": "free_requested", "addr": 1 << 30, "size": 4096, "stream": 0},
    {"action": "free_completed", "addr": 1 << 30, "size": 4096, "stream": 0},
    {"action": "alloc", "addr": 2 << 30, "size": 3 << 20, "stream": 93824992236880},
    {"action": "free_completed", "addr": 2 << 30, "size": 3 << 20, "stream": 93824992236880},
]
with open(sys.argv[1], "wb") as f:
    pickle.dump({"segments": [], "device_traces": [trace]}, f)
