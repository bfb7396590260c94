"""The vision stages (src/backends/vision) served by the real `cinfer serve`, chained by
hand over KServe HTTP with tritonclient, exactly as examples/pipelines/face_analytics
chains them, and compared with an independent NumPy + ONNX Runtime reference
(vision_ref.py):

- astronaut.png: exactly one face; box IoU >= 0.9 with the reference; same age (+-1 year),
  gender and expression labels; crops and preprocessed tensors equal to the reference's;
  embedding cosine >= 0.99.
- the same face letterboxed (astronaut padded to 768x512): same face, mapped back.
- a random-noise image: no face (and an empty crop batch).
- UltraFace (the face_detect variant): one face, IoU >= 0.9 with its reference.
- bad images (corrupt, truncated, not an image, over max_pixels) are 400s naming the cause,
  while other requests, batched with them, succeed."""
import os
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import vision_ref as vr
from cinfer_server import EXAMPLES, Server, copy_repo

VISION = os.path.realpath(os.path.join(EXAMPLES, "..", "..", "..", "shared", "models", "vision"))
STAGES = ["vision_decode", "retinaface_pre", "retinaface_mnet25_v2", "retinaface_post",
          "crop_ssrnet", "crop_expression", "crop_embedding", "ssrnet_age", "ssrnet_gender",
          "densenet_expression", "mobilefacenet_embedding", "decode_age", "decode_gender",
          "decode_expression", "normalize_embedding", "ultraface_pre", "ultraface_rfb320",
          "ultraface_post"]
RETINA_OUTS = [f"face_rpn_{k}_stride{s}" for s in (32, 16, 8)
               for k in ("cls_prob_reshape", "bbox_pred", "landmark_pred")]
SSR_OUTS = ["prob_stage_1", "prob_stage_2", "prob_stage_3", "stage1_delta_k", "stage2_delta_k",
            "stage3_delta_k", "index_offset_stage1", "index_offset_stage2", "index_offset_stage3"]
SMALL_DECODE = """name: "small_decode"
backend: "image_decode"
max_batch_size: 8
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "max_pixels" value: { string_value: "4096" } }
"""
PRE_FP16 = """name: "pre_fp16"
backend: "image_preprocess"
max_batch_size: 4
input [ { name: "PIXELS" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]
output [ { name: "T" data_type: TYPE_FP16 dims: [ 120, 200, 3 ] },
         { name: "X" data_type: TYPE_FP32 dims: [ 6 ] } ]
parameters { key: "width" value: { string_value: "200" } }
parameters { key: "height" value: { string_value: "120" } }
parameters { key: "resize" value: { string_value: "letterbox" } }
parameters { key: "pad_value" value: { string_value: "114" } }
parameters { key: "layout" value: { string_value: "nhwc" } }
parameters { key: "color" value: { string_value: "bgr" } }
parameters { key: "scale" value: { string_value: "0.00392156862745098" } }
parameters { key: "mean" value: { string_value: "0.406,0.456,0.485" } }
parameters { key: "std" value: { string_value: "0.225,0.224,0.229" } }
"""


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(STAGES + ["face_analytics", "face_detect"])
    os.makedirs(os.path.join(repo, "small_decode", "1"))
    with open(os.path.join(repo, "small_decode", "config.pbtxt"), "w") as f:
        f.write(SMALL_DECODE)
    os.makedirs(os.path.join(repo, "pre_fp16", "1"))
    with open(os.path.join(repo, "pre_fp16", "config.pbtxt"), "w") as f:
        f.write(PRE_FP16)
    with Server(repo) as s:
        s.wait_ready()
        yield s


@pytest.fixture(scope="module")
def client(server):
    return httpclient.InferenceServerClient(server.hostport, concurrency=8)


@pytest.fixture(scope="module")
def ref_models():
    return vr.Models(VISION)


@pytest.fixture(scope="module")
def astronaut():
    with open(os.path.join(VISION, "astronaut.png"), "rb") as f:
        data = f.read()
    return data, vr.png_decode(data)


def infer(client, model, inputs, outputs):
    """inputs: {name: ndarray}; returns {name: ndarray} for `outputs`."""
    ins = []
    for name, x in inputs.items():
        if x.dtype == np.float64 and x.size == 0:  # tritonclient reads an empty FP32 output as float64
            x = x.astype(np.float32)
        dt = "BYTES" if x.dtype == object else {np.uint8: "UINT8", np.float32: "FP32"}[x.dtype.type]
        i = httpclient.InferInput(name, list(x.shape), dt)
        i.set_data_from_numpy(x, binary_data=True)
        ins.append(i)
    res = client.infer(model, ins, outputs=[httpclient.InferRequestedOutput(o, binary_data=True)
                                            for o in outputs])
    return {o: res.as_numpy(o) for o in outputs}


def image_bytes(data):
    return np.array([[data]], dtype=object)


def pipeline(client, data):
    """Every stage of face_analytics, in its order, over HTTP."""
    px = infer(client, "vision_decode", {"IMAGE": image_bytes(data)}, ["PIXELS"])["PIXELS"]
    pre = infer(client, "retinaface_pre", {"PIXELS": px}, ["data", "TRANSFORM"])
    det = infer(client, "retinaface_mnet25_v2", {"data": pre["data"]}, RETINA_OUTS)
    det["TRANSFORM"] = pre["TRANSFORM"]
    faces = infer(client, "retinaface_post", det, ["BOXES", "SCORES", "LANDMARKS"])
    out = {"pixels": px, "pre": pre, **faces}
    n = faces["BOXES"].shape[0]
    out["crop64"] = infer(client, "crop_ssrnet", {"PIXELS": px, "BOXES": faces["BOXES"]},
                          ["input"])["input"]
    if n == 0:
        return out
    out["crop224"] = infer(client, "crop_expression", {"PIXELS": px, "BOXES": faces["BOXES"]},
                           ["input"])["input"]
    out["crop112"] = infer(client, "crop_embedding", {"PIXELS": px, "BOXES": faces["BOXES"],
                                                      "LANDMARKS": faces["LANDMARKS"]},
                           ["input"])["input"]
    age_raw = infer(client, "ssrnet_age", {"input": out["crop64"]}, SSR_OUTS)
    gen_raw = infer(client, "ssrnet_gender", {"input": out["crop64"]}, SSR_OUTS)
    out["AGE"] = infer(client, "decode_age", age_raw, ["AGE"])["AGE"]
    out.update(infer(client, "decode_gender", gen_raw, ["GENDER", "GENDER_PROB"]))
    logits = infer(client, "densenet_expression", {"input": out["crop224"]}, ["output"])
    out.update(infer(client, "decode_expression", logits, ["EXPRESSION", "EXPRESSION_PROB"]))
    emb = infer(client, "mobilefacenet_embedding", {"input": out["crop112"]}, ["output"])
    out["EMBEDDING"] = infer(client, "normalize_embedding", emb, ["EMBEDDING"])["EMBEDDING"]
    return out


def check_against_reference(got, ref, img):
    assert got["BOXES"].shape[0] == len(ref) == 1, (got["BOXES"], [f["box"] for f in ref])
    f = ref[0]
    assert vr.iou(got["BOXES"][0], f["box"]) >= 0.9, (got["BOXES"][0], f["box"])
    np.testing.assert_allclose(got["BOXES"][0], f["box"], atol=0.05)
    np.testing.assert_allclose(got["LANDMARKS"][0], f["landmarks"], atol=0.05)
    assert abs(float(got["SCORES"][0]) - f["score"]) < 1e-3
    # The crops the attribute models saw are the reference's crops.
    np.testing.assert_allclose(got["crop64"][0], vr.nchw(f["crops"]["ssrnet"])[0], atol=2e-3)
    np.testing.assert_allclose(got["crop224"][0], vr.nchw(f["crops"]["expression"])[0], atol=2e-3)
    np.testing.assert_allclose(got["crop112"][0], vr.nchw(f["crops"]["embedding"])[0], atol=2e-2)
    assert abs(float(got["AGE"][0, 0]) - f["age"]) <= 1.0, (got["AGE"], f["age"])
    assert got["GENDER"][0, 0].decode() == f["gender"]
    assert got["EXPRESSION"][0, 0].decode() == f["expression"]
    assert abs(float(got["EXPRESSION_PROB"][0, 0]) - f["expression_prob"]) < 1e-3
    gp = f["gender_value"] if f["gender"] == "female" else 1 - f["gender_value"]
    assert abs(float(got["GENDER_PROB"][0, 0]) - gp) < 1e-3
    e = got["EMBEDDING"][0]
    assert abs(np.linalg.norm(e) - 1) < 1e-4
    assert float(np.dot(e, f["embedding"])) >= 0.99


def test_astronaut(client, ref_models, astronaut):
    data, img = astronaut
    got = pipeline(client, data)
    np.testing.assert_array_equal(got["pixels"][0], img)  # lossless decode, same pixels
    canvas, xf = vr.letterbox(img, 640, 640)
    np.testing.assert_allclose(got["pre"]["data"], vr.nchw(canvas), atol=1e-2)  # pixel units; float32 coordinates
    np.testing.assert_allclose(got["pre"]["TRANSFORM"][0], [*xf, 512, 512], atol=1e-6)
    ref = vr.analyse(ref_models, img)
    check_against_reference(got, ref, img)
    # What the README promises about the image: the face near x=180..300, y=40..190.
    b = got["BOXES"][0]
    assert 150 < b[0] < 200 and 250 < b[2] < 320 and 30 < b[1] < 80 and 150 < b[3] < 200
    assert got["GENDER"][0, 0] == b"female" and got["EXPRESSION"][0, 0] == b"happy"


def test_letterboxed(client, ref_models, astronaut):
    _, img = astronaut
    wide = np.full((512, 768, 3), 90, dtype=np.uint8)
    wide[:, 100:612] = img
    got = pipeline(client, vr.png_encode(wide))
    xf = got["pre"]["TRANSFORM"][0]
    np.testing.assert_allclose(xf, [640 / 768, 427 / 512, 0, 106, 768, 512], atol=1e-5)  # 512 * 5/6 = 426.7 -> 427 rows
    check_against_reference(got, vr.analyse(ref_models, wide), wide)
    assert 250 < got["BOXES"][0][0] < 300  # the face moved right by the 100 px


def test_noise_has_no_face(client, ref_models):
    noise = np.random.default_rng(5).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    got = pipeline(client, vr.png_encode(noise))
    assert got["BOXES"].shape == (0, 4) and got["SCORES"].shape == (0,)
    assert got["LANDMARKS"].shape == (0, 10)
    assert got["crop64"].shape == (0, 3, 64, 64)
    assert vr.analyse(ref_models, noise) == []


def test_ultraface_detector(client, astronaut):
    data, img = astronaut
    px = infer(client, "vision_decode", {"IMAGE": image_bytes(data)}, ["PIXELS"])["PIXELS"]
    pre = infer(client, "ultraface_pre", {"PIXELS": px}, ["input", "TRANSFORM"])
    raw = infer(client, "ultraface_rfb320", {"input": pre["input"]}, ["scores", "boxes"])
    raw["TRANSFORM"] = pre["TRANSFORM"]
    got = infer(client, "ultraface_post", raw, ["BOXES", "SCORES"])
    boxes, scores = vr.ultraface_detect(VISION, img)
    assert got["BOXES"].shape[0] == len(boxes) == 1
    assert vr.iou(got["BOXES"][0], boxes[0]) >= 0.9
    assert abs(float(got["SCORES"][0]) - float(scores[0])) < 1e-3


def expect_400(client, model, data, needle):
    with pytest.raises(InferenceServerException) as e:
        infer(client, model, {"IMAGE": image_bytes(data)}, ["PIXELS"])
    assert e.value.status() == "400", (e.value.status(), e.value.message())
    assert needle in e.value.message(), e.value.message()


def test_bad_images(client, astronaut):
    data, _ = astronaut
    expect_400(client, "vision_decode", b"GIF89a not an image", "neither JPEG nor PNG")
    expect_400(client, "vision_decode", data[: len(data) // 2], "bad PNG image")
    expect_400(client, "vision_decode", b"", "empty image")
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    expect_400(client, "vision_decode", bytes(bad), "bad PNG image")
    expect_400(client, "vision_decode", b"\xff\xd8\xff\xe0" + b"\x00" * 64, "bad JPEG image")
    expect_400(client, "small_decode", data, "max_pixels")
    # Two images of different sizes in one request cannot form one tensor.
    small = vr.png_encode(np.zeros((8, 8, 3), dtype=np.uint8))
    i = httpclient.InferInput("IMAGE", [2, 1], "BYTES")
    i.set_data_from_numpy(np.array([[small], [data]], dtype=object), binary_data=True)
    with pytest.raises(InferenceServerException) as e:
        client.infer("vision_decode", [i])
    assert e.value.status() == "400" and "must have one size" in e.value.message()
    assert client.is_server_live() and client.is_model_ready("vision_decode")


def test_batched_requests_fail_alone(client):
    """small_decode batches for up to 20 ms: good and bad images of different sizes meet in
    one batch; each request gets its own answer."""
    imgs = {k: np.random.default_rng(k).integers(0, 256, (8 + k, 5 + 2 * k, 3), dtype=np.uint8)
            for k in range(6)}
    payloads = {k: vr.png_encode(v) for k, v in imgs.items()}
    payloads[6] = b"corrupt"
    payloads[7] = vr.png_encode(np.zeros((100, 100, 3), dtype=np.uint8))  # over 4096 pixels

    reqs = {}
    for k, data in payloads.items():
        i = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
        i.set_data_from_numpy(image_bytes(data), binary_data=True)
        reqs[k] = client.async_infer("small_decode", [i])
    results = {}
    for k, r in reqs.items():
        try:
            results[k] = r.get_result().as_numpy("PIXELS")
        except InferenceServerException as e:
            results[k] = e
    for k, v in imgs.items():
        assert not isinstance(results[k], Exception), results[k]
        np.testing.assert_array_equal(results[k][0], v)
    assert isinstance(results[6], InferenceServerException) and results[6].status() == "400"
    assert isinstance(results[7], InferenceServerException) and "max_pixels" in results[7].message()
    stats = client.get_inference_statistics("small_decode")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] >= 6


def test_preprocess_fp16_nhwc_bgr_letterbox(client, astronaut):
    """The other output options: FP16, NHWC, BGR, a grey letterbox border, a batch of 2."""
    _, img = astronaut
    two = np.stack([img, img[::-1].copy()])
    got = infer(client, "pre_fp16", {"PIXELS": two}, ["T", "X"])
    assert got["T"].dtype == np.float16 and got["T"].shape == (2, 120, 200, 3)
    for k in range(2):
        canvas, xf = vr.letterbox(two[k], 200, 120, pad=114.0)
        want = ((canvas[:, :, ::-1] / 255.0) - np.array([0.406, 0.456, 0.485])) / np.array([0.225, 0.224, 0.229])
        np.testing.assert_allclose(got["T"][k].astype(np.float32), want, atol=2e-2)  # fp16: 3 digits
        np.testing.assert_allclose(got["X"][k], [*xf, 512, 512], atol=1e-6)
    assert got["X"][0][2] == 40 and got["X"][0][3] == 0  # pillarboxed: 120x120 in 200 wide


def ensemble(client, model, data):
    r = client.infer(model, [_image_input(data)])
    return {o["name"]: r.as_numpy(o["name"]) for o in r.get_response()["outputs"]}


def _image_input(data):
    x = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    x.set_data_from_numpy(image_bytes(data))
    return x


def test_face_analytics_ensemble(client, ref_models, astronaut):
    """The example pipeline itself (examples/model_repository/face_analytics, a Triton
    ensemble over the stages): one request per image, the same answer as the independent
    reference; and the stage models' statistics show the ensemble's steps ran on them."""
    data, img = astronaut
    before = client.get_inference_statistics("retinaface_mnet25_v2")["model_stats"][0]["inference_count"]
    got = ensemble(client, "face_analytics", data)
    ref = vr.analyse(ref_models, img)
    assert got["BOXES"].shape[0] == len(ref) == 1
    f = ref[0]
    assert vr.iou(got["BOXES"][0], f["box"]) >= 0.9, (got["BOXES"][0], f["box"])
    np.testing.assert_allclose(got["LANDMARKS"][0], f["landmarks"], atol=0.05)
    assert abs(float(got["AGE"][0, 0]) - f["age"]) <= 1.0, (got["AGE"], f["age"])
    assert got["GENDER"][0, 0].decode() == f["gender"] == "female"
    assert got["EXPRESSION"][0, 0].decode() == f["expression"] == "happy"
    e = got["EMBEDDING"][0]
    assert abs(np.linalg.norm(e) - 1) < 1e-4 and float(np.dot(e, f["embedding"])) >= 0.99
    after = client.get_inference_statistics("retinaface_mnet25_v2")["model_stats"][0]["inference_count"]
    assert int(after) == int(before) + 1
    noise = np.random.default_rng(5).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    got = ensemble(client, "face_analytics", vr.png_encode(noise))
    assert got["BOXES"].shape == (0, 4) and got["AGE"].shape[0] == 0 and got["EMBEDDING"].shape[0] == 0
    det = ensemble(client, "face_detect", data)
    assert det["BOXES"].shape == (1, 4) and vr.iou(det["BOXES"][0], f["box"]) >= 0.7
    # a corrupt image fails the request naming the step; the next one is served
    with pytest.raises(InferenceServerException) as e:
        ensemble(client, "face_analytics", data[:200])
    assert "in ensemble 'face_analytics', step 0 (model 'vision_decode')" in str(e.value), str(e.value)
    assert ensemble(client, "face_analytics", data)["BOXES"].shape[0] == 1


def expect_stage_400(client, model, inputs, outputs, needle):
    with pytest.raises(InferenceServerException) as e:
        infer(client, model, inputs, outputs)
    assert e.value.status() == "400", (model, e.value.status(), e.value.message())
    assert needle in e.value.message(), (model, e.value.message())


def test_stage_bad_inputs(client, astronaut):
    """Each stage refuses inputs it cannot use with a 400 naming the cause; the server and
    the stage keep serving."""
    _, img = astronaut
    px = img[None].copy()
    f32 = np.float32
    box = np.array([[170, 50, 280, 180]], dtype=f32)
    # detection_postprocess: a transform with scale 0, a transform of the wrong size.
    zeros = {r: np.zeros([1, (4 if "cls" in r else 8 if "bbox" in r else 20), n, n], dtype=f32)
             for r, n in zip(RETINA_OUTS, [20, 20, 20, 40, 40, 40, 80, 80, 80])}
    expect_stage_400(client, "retinaface_post", {**zeros, "TRANSFORM": np.zeros((1, 6), f32)},
                     ["BOXES"], "transform value 0")
    bad_xf = np.array([[1, 1, 0, 0, 512, np.nan]], dtype=f32)
    expect_stage_400(client, "retinaface_post", {**zeros, "TRANSFORM": bad_xf}, ["BOXES"],
                     "transform value 5")
    # face_crop: non-finite boxes, degenerate landmarks, too many faces.
    expect_stage_400(client, "crop_ssrnet", {"PIXELS": px, "BOXES": np.array([[0, 0, np.inf, 9]], f32)},
                     ["input"], "box 1 is not finite")
    same = np.full((1, 10), 100, dtype=f32)
    expect_stage_400(client, "crop_embedding", {"PIXELS": px, "BOXES": box, "LANDMARKS": same},
                     ["input"], "degenerate")
    many = np.tile(box, (65, 1))
    expect_stage_400(client, "crop_ssrnet", {"PIXELS": px, "BOXES": many}, ["input"], "max_faces")
    # A box far outside the image still gives a (border) crop, not an error.
    out = infer(client, "crop_ssrnet", {"PIXELS": px, "BOXES": np.array([[-900, -900, -800, -800]], f32)},
                ["input"])["input"]
    assert out.shape == (1, 3, 64, 64) and np.isfinite(out).all()
    # image_preprocess: an image without 3 channels is refused by the config's dims.
    with pytest.raises(InferenceServerException) as e:
        infer(client, "retinaface_pre", {"PIXELS": np.zeros((1, 4, 4, 4), np.uint8)}, ["data"])
    assert e.value.status() == "400"
    assert client.is_server_live()
    for m in ("retinaface_post", "crop_ssrnet", "crop_embedding", "retinaface_pre"):
        assert client.is_model_ready(m)
