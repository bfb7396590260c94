"""An independent Python reference of the face pipeline (NumPy + ONNX Runtime), written
apart from the C backends of src/backends/vision: the same documented semantics
(docs/vision.md), other code. Used by test_vision_pipeline.py.

PNG decoding (zlib + the five filters), bilinear resize with half-pixel centres, letterbox,
RetinaFace decoding (InsightFace layout), greedy NMS, box crops, the least-squares
similarity (solved with numpy.linalg.lstsq, not the closed form the C code uses), affine
warp, SSR-Net merge, softmax and L2 normalisation."""
import os
import struct
import zlib

import numpy as np

ARCFACE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                    [41.5493, 92.3655], [70.7299, 92.2041]], dtype=np.float64)
EXPRESSIONS = ["angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"]
GENDERS = ["male", "female"]
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406])
IMAGENET_STD = np.array([0.229, 0.224, 0.225])


def png_decode(data):
    """8-bit RGB or RGBA, non-interlaced PNG -> HWC uint8 RGB (alpha dropped; the test
    images are opaque)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
    ch = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + w * ch)
    out = np.zeros((h, w * ch), dtype=np.int32)
    prev = np.zeros(w * ch, dtype=np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros(w * ch, dtype=np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:
            for x in range(w * ch):
                a = cur[x - ch] if x >= ch else 0
                b = prev[x]
                c = prev[x - ch] if x >= ch else 0
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return out.reshape(h, w, ch)[:, :, :3].astype(np.uint8)


def _coords(n_out, n_in):
    f = (np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5
    f = np.clip(f, 0, n_in - 1)
    i0 = np.floor(f).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, f - i0


def resize(img, out_w, out_h):
    """Bilinear, half-pixel centres, edges replicated: HWC float64."""
    h, w = img.shape[:2]
    x0, x1, wx = _coords(out_w, w)
    y0, y1, wy = _coords(out_h, h)
    im = img.astype(np.float64)
    top = im[y0][:, x0] + (im[y0][:, x1] - im[y0][:, x0]) * wx[None, :, None]
    bot = im[y1][:, x0] + (im[y1][:, x1] - im[y1][:, x0]) * wx[None, :, None]
    return top + (bot - top) * wy[:, None, None]


def letterbox(img, out_w, out_h, pad=0.0):
    """-> canvas HWC float64 and (scale_x, scale_y, pad_x, pad_y)."""
    h, w = img.shape[:2]
    s = min(out_w / w, out_h / h)
    nw, nh = min(max(int(round(w * s)), 1), out_w), min(max(int(round(h * s)), 1), out_h)
    px, py = (out_w - nw) // 2, (out_h - nh) // 2
    canvas = np.full((out_h, out_w, 3), pad, dtype=np.float64)
    canvas[py:py + nh, px:px + nw] = resize(img, nw, nh)
    return canvas, (nw / w, nh / h, px, py)


def nchw(x):
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None].astype(np.float32))


def retina_decode(outs, strides=(32, 16, 8), sizes=((512, 256), (128, 64), (32, 16)),
                  var_l=0.2, thresh=0.5):
    """outs: the nine retinaface outputs in graph order. -> boxes [K,4], scores, landmarks
    [K,10] in network-input pixels."""
    boxes, scores, lmks = [], [], []
    for k, s in enumerate(strides):
        cls, bb, lm = outs[3 * k][0], outs[3 * k + 1][0], outs[3 * k + 2][0]
        A = cls.shape[0] // 2
        for y, x, a in zip(*np.nonzero(cls[A:].transpose(1, 2, 0) >= thresh)):
            size = sizes[k][a]
            cx, cy = x * s + 7.5, y * s + 7.5
            dx, dy, dw, dh = bb[4 * a:4 * a + 4, y, x]
            pcx, pcy = dx * size + cx, dy * size + cy
            pw, ph = np.exp(dw) * size, np.exp(dh) * size
            boxes.append([pcx - 0.5 * (pw - 1), pcy - 0.5 * (ph - 1), pcx + 0.5 * (pw - 1),
                          pcy + 0.5 * (ph - 1)])
            scores.append(cls[A + a, y, x])
            l = lm[10 * a:10 * a + 10, y, x].reshape(5, 2)
            lmks.append((np.array([cx, cy]) + l * size * var_l).reshape(10))
    return np.array(boxes).reshape(-1, 4), np.array(scores), np.array(lmks).reshape(-1, 10)


def iou(a, b):
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def nms(boxes, scores, thr=0.4, max_keep=64):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep = []
    for i in order:
        if len(keep) < max_keep and all(iou(boxes[i], boxes[k]) <= thr for k in keep):
            keep.append(i)
    return keep


def to_original(boxes, lmks, xf, w, h):
    sx, sy, px, py = xf
    b = boxes.copy()
    b[:, [0, 2]] = np.clip((b[:, [0, 2]] - px) / sx, 0, w)
    b[:, [1, 3]] = np.clip((b[:, [1, 3]] - py) / sy, 0, h)
    l = lmks.copy()
    l[:, 0::2] = (l[:, 0::2] - px) / sx
    l[:, 1::2] = (l[:, 1::2] - py) / sy
    return b, l


def crop_box(img, box, size, margin, square):
    H, W = img.shape[:2]
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    w, h = (box[2] - box[0]) * (1 + 2 * margin), (box[3] - box[1]) * (1 + 2 * margin)
    if square:
        w = h = max(w, h)
    x0, x1 = int(np.floor(cx - w / 2)), int(np.ceil(cx + w / 2))
    y0, y1 = int(np.floor(cy - h / 2)), int(np.ceil(cy + h / 2))
    x0, y0 = min(max(x0, 0), W - 1), min(max(y0, 0), H - 1)
    x1, y1 = max(min(x1, W), x0 + 1), max(min(y1, H), y0 + 1)
    return resize(img[y0:y1, x0:x1], size, size)


def similarity(src, dst):
    """Least squares for dst = [[a, -b], [b, a]] src + t, by lstsq: returns 2x3."""
    A, y = [], []
    for (px, py), (qx, qy) in zip(src, dst):
        A.append([px, -py, 1, 0]); y.append(qx)
        A.append([py, px, 0, 1]); y.append(qy)
    a, b, tx, ty = np.linalg.lstsq(np.array(A), np.array(y), rcond=None)[0]
    return np.array([[a, -b, tx], [b, a, ty]])


def warp(img, m_dst_to_src, size, border=0.0):
    H, W = img.shape[:2]
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
    fx = m_dst_to_src[0, 0] * xs + m_dst_to_src[0, 1] * ys + m_dst_to_src[0, 2]
    fy = m_dst_to_src[1, 0] * xs + m_dst_to_src[1, 1] * ys + m_dst_to_src[1, 2]
    x0, y0 = np.floor(fx).astype(np.int64), np.floor(fy).astype(np.int64)
    wx, wy = (fx - x0)[..., None], (fy - y0)[..., None]
    im = img.astype(np.float64)

    def px(yy, xx):
        ok = (xx >= 0) & (yy >= 0) & (xx < W) & (yy < H)
        v = im[np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)]
        return np.where(ok[..., None], v, border)

    top = px(y0, x0) + (px(y0, x0 + 1) - px(y0, x0)) * wx
    bot = px(y0 + 1, x0) + (px(y0 + 1, x0 + 1) - px(y0 + 1, x0)) * wx
    out = top + (bot - top) * wy
    inside = (fx > -1) & (fy > -1) & (fx < W) & (fy < H)
    return np.where(inside[..., None], out, border)


def align(img, lmk, size=112):
    fwd = similarity(lmk.reshape(5, 2), ARCFACE * size / 112.0)
    full = np.vstack([fwd, [0, 0, 1]])
    return warp(img, np.linalg.inv(full)[:2], size)


def ssrnet_merge(o, stage_num=(3, 3, 3)):
    """o: the nine SSR-Net outputs of one face (graph order)."""
    total, den = 0.0, 1.0
    S = len(stage_num)
    for k, s in enumerate(stage_num):
        prob, delta, off = o[k].reshape(-1), float(o[S + k].reshape(-1)[0]), o[2 * S + k].reshape(-1)
        v = sum((i + off[i]) * prob[i] for i in range(s))
        den *= s * (1 + delta)
        total += v / den
    return total


def softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


class Models:
    """The six ONNX models under ONNX Runtime (one intra-op thread)."""

    def __init__(self, vision_dir):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        self.s = {m: ort.InferenceSession(os.path.join(vision_dir, m, "model.onnx"), so,
                                          providers=["CPUExecutionProvider"])
                  for m in ["retinaface_mnet25_v2", "ssrnet_age", "ssrnet_gender",
                            "densenet_expression", "mobilefacenet_embedding"]}

    def run(self, m, x):
        s = self.s[m]
        return s.run(None, {s.get_inputs()[0].name: x})


def analyse(models, img):
    """The whole pipeline on one HWC uint8 image -> list of per-face dicts."""
    h, w = img.shape[:2]
    canvas, xf = letterbox(img, 640, 640)
    outs = models.run("retinaface_mnet25_v2", nchw(canvas))
    boxes, scores, lmks = retina_decode(outs)
    keep = nms(boxes, scores)
    boxes, scores, lmks = boxes[keep], scores[keep], lmks[keep]
    boxes, lmks = to_original(boxes, lmks, xf, w, h)
    faces = []
    for b, s, l in zip(boxes, scores, lmks):
        c64 = (crop_box(img, b, 64, 0.2, True) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
        age = ssrnet_merge(models.run("ssrnet_age", nchw(c64))) * 101
        g = ssrnet_merge(models.run("ssrnet_gender", nchw(c64)))
        c224 = crop_box(img, b, 224, 0.1, False) / 255.0
        e = softmax(models.run("densenet_expression", nchw(c224))[0][0])
        c112 = (align(img, l) - 127.5) / 128.0
        emb = models.run("mobilefacenet_embedding", nchw(c112))[0][0]
        faces.append({"box": b, "score": float(s), "landmarks": l, "age": float(age),
                      "gender": GENDERS[int(g >= 0.5)], "gender_value": float(g),
                      "expression": EXPRESSIONS[int(np.argmax(e))],
                      "expression_prob": float(e.max()),
                      "embedding": emb / np.linalg.norm(emb),
                      "crops": {"ssrnet": c64, "expression": c224, "embedding": c112}})
    return faces


def ultraface_detect(models_dir, img, thresh=0.7, iou_thr=0.3):
    """UltraFace on a 320x240 stretch, (v - 127) / 128 -> boxes in the image, best first."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(os.path.join(models_dir, "ultraface_rfb320", "model.onnx"), so,
                             providers=["CPUExecutionProvider"])
    h, w = img.shape[:2]
    x = (resize(img, 320, 240) - 127.0) / 128.0
    scores, boxes = s.run(None, {"input": nchw(x)})
    sc, bx = scores[0][:, 1], boxes[0] * np.array([320, 240, 320, 240])
    idx = np.nonzero(sc >= thresh)[0]
    keep = nms(bx[idx], sc[idx], iou_thr, 100)
    out = bx[idx][keep] / np.array([320 / w, 240 / h, 320 / w, 240 / h])
    return np.clip(out, 0, [w, h, w, h]), sc[idx][keep]


def png_encode(img):
    """HWC uint8 RGB -> PNG bytes (filter 0)."""
    h, w = img.shape[:2]
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
