#!/usr/bin/env python3
"""face_analytics the way users write it today: OpenCV reads the video and resizes and
warps, ONNX Runtime runs each model, NumPy decodes RetinaFace's anchors, runs NMS and
the SSR-Net merge, frame by frame (one frame, then its faces, then the next frame).

The same semantics as the face_analytics_frames ensemble (docs/vision.md): letterbox to
640x640 (raw 0..255), RetinaFace decoding at score >= 0.5, NMS 0.4, boxes mapped back;
crops with margin 0.2 square (64x64, ImageNet mean/std) for SSR-Net age and gender, margin
0.1 (224x224, /255) for the expression, a 5-landmark similarity to the ArcFace template
(112x112, (v - 127.5) / 128) for the embedding.

usage: opencv_ort_pipeline.py VIDEO [--frames N] [--threads T] [--jsonl OUT]
Prints one JSON object: frames, seconds, frames_per_s."""
import argparse
import json
import os
import sys
import time

import cv2
import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import vision_ref as vr  # noqa: E402  (decoding, NMS and SSR-Net merge: NumPy, as users write them)

VISION = os.path.realpath(os.path.join(HERE, "..", "..", "..", "shared", "models", "vision"))


def crop(img, box, size, margin, square):
    H, W = img.shape[:2]
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    w, h = (box[2] - box[0]) * (1 + 2 * margin), (box[3] - box[1]) * (1 + 2 * margin)
    if square:
        w = h = max(w, h)
    x0, x1 = int(np.floor(cx - w / 2)), int(np.ceil(cx + w / 2))
    y0, y1 = int(np.floor(cy - h / 2)), int(np.ceil(cy + h / 2))
    x0, y0 = min(max(x0, 0), W - 1), min(max(y0, 0), H - 1)
    x1, y1 = max(min(x1, W), x0 + 1), max(min(y1, H), y0 + 1)
    return cv2.resize(img[y0:y1, x0:x1], (size, size), interpolation=cv2.INTER_LINEAR).astype(np.float32)


def blob(x):
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("video")
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--jsonl")
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.log_severity_level = 3
    S = {m: ort.InferenceSession(os.path.join(VISION, m, "model.onnx"), so, providers=["CPUExecutionProvider"])
         for m in ["retinaface_mnet25_v2", "ssrnet_age", "ssrnet_gender", "densenet_expression",
                   "mobilefacenet_embedding"]}

    def run(m, x):
        return S[m].run(None, {S[m].get_inputs()[0].name: x})

    cap = cv2.VideoCapture(a.video)
    if not cap.isOpened():
        sys.exit(f"cannot open {a.video}")
    out = open(a.jsonl, "w") if a.jsonl else None
    n, t0 = 0, time.perf_counter()
    mean, std = vr.IMAGENET_MEAN.astype(np.float32), vr.IMAGENET_STD.astype(np.float32)
    while not a.frames or n < a.frames:
        ok, bgr = cap.read()
        if not ok:
            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)  # loop the file, as cinfer streams does
            ok, bgr = cap.read()
            if not ok:
                break
        img = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        h, w = img.shape[:2]
        s = min(640 / w, 640 / h)
        nw, nh = min(max(int(round(w * s)), 1), 640), min(max(int(round(h * s)), 1), 640)
        px, py = (640 - nw) // 2, (640 - nh) // 2
        canvas = np.zeros((640, 640, 3), np.float32)
        canvas[py:py + nh, px:px + nw] = cv2.resize(img, (nw, nh), interpolation=cv2.INTER_LINEAR)
        boxes, scores, lmks = vr.retina_decode(run("retinaface_mnet25_v2", blob(canvas)))
        keep = vr.nms(boxes, scores)
        boxes, lmks = vr.to_original(boxes[keep], lmks[keep], (nw / w, nh / h, px, py), w, h)
        faces = []
        for b, sc, lm in zip(boxes, scores[keep], lmks):
            c64 = (crop(img, b, 64, 0.2, True) / 255.0 - mean) / std
            age = vr.ssrnet_merge(run("ssrnet_age", blob(c64))) * 101
            g = vr.ssrnet_merge(run("ssrnet_gender", blob(c64)))
            e = vr.softmax(run("densenet_expression", blob(crop(img, b, 224, 0.1, False) / 255.0))[0][0])
            m = vr.similarity(lm.reshape(5, 2), vr.ARCFACE)
            c112 = cv2.warpAffine(img, m, (112, 112), flags=cv2.INTER_LINEAR).astype(np.float32)
            emb = run("mobilefacenet_embedding", blob((c112 - 127.5) / 128.0))[0][0]
            faces.append({"box": [float(v) for v in b], "score": float(sc), "age": float(age),
                          "gender": vr.GENDERS[int(g >= 0.5)],
                          "expression": vr.EXPRESSIONS[int(np.argmax(e))],
                          "embedding_norm": float(np.linalg.norm(emb / np.linalg.norm(emb)))})
        if out:
            out.write(json.dumps({"frame": n, "faces": faces}) + "\n")
        n += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"frames": n, "seconds": dt, "frames_per_s": n / dt if dt else 0, "threads": a.threads}))


if __name__ == "__main__":
    main()
