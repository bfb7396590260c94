#!/usr/bin/env python3
"""Frame-by-frame agreement of two face_analytics result files: the Python + OpenCV +
ONNX Runtime pipeline's JSON lines (opencv_ort_pipeline.py --jsonl) and cinfer streams'
(--jsonl). Same frames, same faces (box IoU >= 0.9), age within 1 year, same gender and
expression labels. Age is reported apart (max difference, frames beyond 1 year): SSR-Net's
age moves by a year or two with the interpolation of its 64x64 crop, and OpenCV's resize
is fixed-point where cinfer's (and tests/integration/vision_ref.py's) is float. Prints a
summary; exits 1 when a face, box or label disagrees."""
import json
import sys

import numpy as np


def iou(a, b):
    iw, ih = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    i = iw * ih
    return i / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - i)


py = {d["frame"]: d["faces"] for d in map(json.loads, open(sys.argv[1]))}
ci = {d["frame"]: d["outputs"] for d in map(json.loads, open(sys.argv[2])) if "outputs" in d}
common = sorted(set(py) & set(ci))
bad, ious, dage = [], [], []
for f in common:
    p, o = py[f], ci[f]
    if len(p) != len(o["BOXES"]):
        bad.append((f, "faces", len(p), len(o["BOXES"])))
        continue
    for k, face in enumerate(p):
        v = iou(face["box"], o["BOXES"][k])
        ious.append(v)
        dage.append(abs(face["age"] - o["AGE"][k][0]))
        if v < 0.9 or face["gender"] != o["GENDER"][k][0] or \
                face["expression"] != o["EXPRESSION"][k][0]:
            bad.append((f, k, v, face["age"], o["AGE"][k][0], face["gender"], o["GENDER"][k][0],
                        face["expression"], o["EXPRESSION"][k][0]))
print(f"compare: {len(common)} frames in both, {len(ious)} faces; box IoU min "
      f"{min(ious) if ious else 0:.3f} mean {np.mean(ious) if ious else 0:.3f}; age |diff| max "
      f"{max(dage) if dage else 0:.2f} years ({sum(d > 1 for d in dage)} faces beyond 1 year); "
      f"{len(bad)} disagreements in faces, boxes (IoU < 0.9), gender or expression" + (f": {bad[:5]}" if bad else ""))
sys.exit(1 if bad or not common else 0)
