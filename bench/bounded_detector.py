"""Detectors whose outputs vary with the image, compiled once, against onnxruntime.

    python bench/bounded_detector.py [--images 5] [--models tiny,ssdlite] [--out FILE]

Two models, each exported by torch's legacy ONNX exporter (opset 17) and compiled by
aotc without `--const` (their counts are run-time extents, bounded: NonZero, TopK,
NonMaxSuppression, If on the detections' count):

- `ssdlite`: torchvision's ssdlite320_mobilenet_v3_large with random weights (10
  classes, seed 0, score threshold 0.3), its batch norms calibrated on 8 noise images
  (their running statistics set to those images' own: untrained, the activations
  vanish to 1e-14 by the heads, every score is 0.1 and every image returns the same
  300 detections), so that the number of detections varies from image to image.
- `tiny`: a small detector written here: per-anchor class scores and boxes from two
  convolutions of the image, then torchvision's postprocessing ops (a score threshold,
  top-k, batched NMS, at most 50 detections), so that the number of detections varies
  from image to image.

For each of --images images (uniform noise, its contrast varied), the table gives the
number of detections and whether aotc's outputs equal onnxruntime's (boxes and scores
within 1e-5 of the largest, labels exactly; the detections' order is the NMS order,
so the arrays compare element by element).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from aotc.driver import CompileOptions, compile_model

TOLERANCE = 1e-5


def export_ssdlite(path: Path) -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=10, score_thresh=0.3
    )
    for module in model.modules():  # running statistics: the plain average of a pass
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None
    rng = np.random.default_rng(1)  # not the images measured
    calibration = [
        torch.from_numpy((rng.uniform(0, 1, (3, 320, 320)) ** (0.5 + k)).astype(np.float32))
        for k in range(8)
    ]
    model.train()
    with torch.no_grad():
        batch = model.transform(calibration)[0].tensors
        model.head(list(model.backbone(batch).values()))
    model.eval()
    image = torch.rand(3, 320, 320)
    torch.onnx.export(
        model,
        ([image],),
        str(path),
        input_names=["images"],
        output_names=["boxes", "scores", "labels"],
        opset_version=17,
        dynamo=False,
    )


def export_tiny(path: Path) -> None:
    import torch
    from torchvision.models.detection._utils import _topk_min
    from torchvision.ops import batched_nms

    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.features = torch.nn.Conv2d(3, 8, 5, stride=4, padding=2)
            self.scores = torch.nn.Conv2d(8, 3, 3, padding=1)
            self.boxes = torch.nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, image):
            x = torch.relu(self.features(image[None]))
            scores = torch.sigmoid(self.scores(x))[0].flatten(1).t()  # [anchors, classes]
            deltas = self.boxes(x)[0].flatten(1).t()  # [anchors, 4]
            corner = torch.sigmoid(deltas[:, :2]) * 64
            boxes = torch.cat([corner, corner + torch.sigmoid(deltas[:, 2:]) * 16], 1)
            best, labels = scores.max(1)
            keep = torch.nonzero(best > 0.53).flatten()
            best, labels, boxes = best[keep], labels[keep], boxes[keep]
            top = torch.topk(best, _topk_min(best, 100, 0))
            best, labels, boxes = top.values, labels[top.indices], boxes[top.indices]
            chosen = batched_nms(boxes, best, labels, 0.5)[:50]
            return boxes[chosen], best[chosen], labels[chosen]

    image = torch.rand(3, 64, 64)
    torch.onnx.export(
        Tiny().eval(),
        (image,),
        str(path),
        input_names=["images"],
        output_names=["boxes", "scores", "labels"],
        opset_version=17,
        dynamo=False,
    )


def images(shape, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.uniform(0, 1, shape) ** (0.5 + k)).astype(np.float32) for k in range(count)]


def equal(got, want) -> bool:
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return False
    for g, w in zip(got, want):
        if w.dtype.kind == "f":
            scale = max(float(np.abs(w).max()) if w.size else 0.0, 1.0)
            if w.size and float(np.abs(g - w).max()) > TOLERANCE * scale:
                return False
        elif not np.array_equal(g, w):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=5)
    parser.add_argument("--models", default="tiny,ssdlite", help="comma-separated")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import onnxruntime as ort

    lines = [
        "# Detectors compiled once: outputs that vary with the image",
        "",
        f"Made by `python {' '.join(sys.argv)}`.",
        "",
        "| model | compile s | output bounds | detections per image | equal to ORT |",
        "|---|---:|---|---|---|",
    ]
    models = (("tiny", export_tiny, (3, 64, 64)), ("ssdlite", export_ssdlite, (3, 320, 320)))
    with tempfile.TemporaryDirectory() as tmp:
        for name, export, shape in models:
            if name not in args.models.split(","):
                continue
            path = Path(tmp) / f"{name}.onnx"
            export(path)
            started = time.perf_counter()
            compiled = compile_model(path, CompileOptions())
            seconds = time.perf_counter() - started
            loaded = compiled.load()
            session = ort.InferenceSession(str(path))
            counts, agree = [], []
            for image in images(shape, args.images):
                got = loaded.run([image])
                want = session.run(None, {"images": image})
                counts.append(str(len(want[1])))
                agree.append(equal(got, want))
            bounds = ", ".join(t.type_text for t in loaded.model_outputs)
            verdict = "yes" if all(agree) else f"no ({agree.count(False)} of {len(agree)})"
            lines.append(f"| {name} | {seconds:.1f} | {bounds} | {' '.join(counts)} | {verdict} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
