"""Torch networks of the benchmark corpus that no package ships, written here at the
sizes their papers and reference code use, and the wrappers the exporters need.

bench/corpus.py imports this module inside its builders only, so that the corpus table
reads without torch (the `bench` extra) installed.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

# ---------------------------------------------------------------------------- export helpers


class Outputs(nn.Module):
    """`inner` returning the tensors under `keys` of its output (a dict or a transformers
    ModelOutput), called with its inputs by name (`input_names`) or else by position:
    the exporters take positional tensors in and a tuple of tensors out."""

    def __init__(self, inner: nn.Module, keys: list[str], input_names: list[str] | None = None):
        super().__init__()
        self.inner, self.keys, self.input_names = inner, keys, input_names

    def forward(self, *args):
        if self.input_names is None:
            out = self.inner(*args)
        else:
            out = self.inner(**dict(zip(self.input_names, args)))
        return tuple(out[k] for k in self.keys)


class DetectorHead(nn.Module):
    """A torchvision detector's backbone and head without its anchor decoding and NMS
    (data-dependent shapes, which a compiled model with fixed shapes does not have)."""

    def __init__(self, detector: nn.Module):
        super().__init__()
        self.backbone, self.head = detector.backbone, detector.head

    def forward(self, x):
        out = self.head(list(self.backbone(x).values()))
        return out["bbox_regression"], out["cls_logits"]


@torch.no_grad()
def calibrate_batch_norms(module: nn.Module, example: torch.Tensor) -> None:
    """Give every batch norm random scale and shift, and the running statistics of its
    input on random data like `example` (batch 2: one sample would leave some 1x1 maps a
    single value): a freshly initialized norm (mean 0, variance 1, identity affine)
    divides by the wrong spread, so deep random networks blow up or go flat."""
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        if norm.affine:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.2, 0.2)
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: one batch sets the statistics
    module.train()
    module(torch.rand(2, *example.shape[1:], dtype=example.dtype))
    module.eval()


@torch.no_grad()
def randomize_zero_weights(module: nn.Module) -> None:
    """Draw the weight matrices a model initializes to zero (torchvision's ViT head):
    an output of zeros agrees with anything."""
    for weight in module.parameters():
        if weight.dim() >= 2 and not weight.any():
            nn.init.normal_(weight, std=weight[0].numel() ** -0.5)


# ---------------------------------------------------------------------------- building blocks


class ConvBnAct(nn.Sequential):
    """Conv (no bias) + BatchNorm + activation, the unit of YOLO, DBNet and U-Net."""

    def __init__(self, c_in, c_out, k=3, s=1, act: type[nn.Module] = nn.SiLU):
        super().__init__(
            nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False), nn.BatchNorm2d(c_out), act()
        )


# ---------------------------------------------------------------------------- YOLOv8


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True):
        super().__init__()
        self.cv1, self.cv2 = ConvBnAct(c, c), ConvBnAct(c, c)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """Split in two, chain n bottlenecks on one half, concatenate every stage."""

    def __init__(self, c_in, c_out, n=1, shortcut=False):
        super().__init__()
        self.c = c_out // 2
        self.cv1 = ConvBnAct(c_in, 2 * self.c, 1)
        self.cv2 = ConvBnAct((2 + n) * self.c, c_out, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools, concatenated."""

    def __init__(self, c_in, c_out):
        super().__init__()
        hidden = c_in // 2
        self.cv1 = ConvBnAct(c_in, hidden, 1)
        self.cv2 = ConvBnAct(hidden * 4, c_out, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        y = [self.cv1(x)]
        y.extend(self.pool(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Detect(nn.Module):
    """YOLOv8's anchor-free head with its exported decoding: distribution focal loss
    (softmax over 16 bins, expectation by a 1x1 conv), distances to boxes, class sigmoid."""

    reg_max = 16

    def __init__(self, nc, channels, strides, size):
        super().__init__()
        c2, c3 = max(16, channels[0] // 4, self.reg_max * 4), max(channels[0], min(nc, 100))
        self.nc, self.no = nc, nc + 4 * self.reg_max
        self.box = nn.ModuleList(
            nn.Sequential(ConvBnAct(c, c2), ConvBnAct(c2, c2), nn.Conv2d(c2, 4 * self.reg_max, 1))
            for c in channels
        )
        self.cls = nn.ModuleList(
            nn.Sequential(ConvBnAct(c, c3), ConvBnAct(c3, c3), nn.Conv2d(c3, nc, 1))
            for c in channels
        )
        self.dfl = nn.Conv2d(self.reg_max, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(self.reg_max, dtype=torch.float).view(1, -1, 1, 1)
        anchors, anchor_strides = [], []
        for stride in strides:
            n = size // stride
            ys, xs = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
            anchors.append(torch.stack((xs, ys), -1).view(-1, 2))
            anchor_strides.append(torch.full((n * n, 1), float(stride)))
        self.register_buffer("anchors", torch.cat(anchors).T.unsqueeze(0))
        self.register_buffer("strides", torch.cat(anchor_strides).T.unsqueeze(0))

    def forward(self, features):
        maps = [torch.cat((b(x), c(x)), 1) for x, b, c in zip(features, self.box, self.cls)]
        batch = features[0].shape[0]
        flat = torch.cat([m.view(batch, self.no, -1) for m in maps], 2)
        box, cls = flat.split((4 * self.reg_max, self.nc), 1)
        bins = box.view(batch, 4, self.reg_max, -1).transpose(2, 1).softmax(1)
        dist = self.dfl(bins).view(batch, 4, -1)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
        return torch.cat((xywh, cls.sigmoid()), 1)


class YOLOv8(nn.Module):
    """YOLOv8 backbone (C2f stages, SPPF), PAN neck (nearest upsampling, concatenation)
    and detection head; `width`/`depth` 0.25/0.33 is YOLOv8n."""

    def __init__(self, size=640, nc=80, width=0.25, depth=0.33):
        super().__init__()
        c = [int(x * width) for x in (64, 128, 256, 512, 1024)]

        def n(k):
            return max(round(k * depth), 1)

        self.stem = nn.Sequential(ConvBnAct(3, c[0], 3, 2), ConvBnAct(c[0], c[1], 3, 2))
        self.c2 = C2f(c[1], c[1], n(3), True)
        self.p3 = nn.Sequential(ConvBnAct(c[1], c[2], 3, 2), C2f(c[2], c[2], n(6), True))
        self.p4 = nn.Sequential(ConvBnAct(c[2], c[3], 3, 2), C2f(c[3], c[3], n(6), True))
        self.p5 = nn.Sequential(
            ConvBnAct(c[3], c[4], 3, 2), C2f(c[4], c[4], n(3), True), SPPF(c[4], c[4])
        )
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.td4 = C2f(c[4] + c[3], c[3], n(3))
        self.td3 = C2f(c[3] + c[2], c[2], n(3))
        self.down3 = ConvBnAct(c[2], c[2], 3, 2)
        self.bu4 = C2f(c[2] + c[3], c[3], n(3))
        self.down4 = ConvBnAct(c[3], c[3], 3, 2)
        self.bu5 = C2f(c[3] + c[4], c[4], n(3))
        self.detect = Detect(nc, (c[2], c[3], c[4]), (8, 16, 32), size)

    def forward(self, x):
        p3 = self.p3(self.c2(self.stem(x)))
        p4 = self.p4(p3)
        p5 = self.p5(p4)
        t4 = self.td4(torch.cat((self.up(p5), p4), 1))
        t3 = self.td3(torch.cat((self.up(t4), p3), 1))
        b4 = self.bu4(torch.cat((self.down3(t3), t4), 1))
        b5 = self.bu5(torch.cat((self.down4(b4), p5), 1))
        return self.detect([t3, b4, b5])


# ---------------------------------------------------------------------------- U-Net


class UNet(nn.Module):
    """U-Net: double 3x3 convs, max-pool down, 2x2 stride-2 transposed-conv up, skip
    concatenation, 1x1 classifier."""

    def __init__(self, classes=2, widths=(32, 64, 128, 256, 512)):
        super().__init__()

        def double(c_in, c_out):
            act = nn.ReLU
            return nn.Sequential(ConvBnAct(c_in, c_out, act=act), ConvBnAct(c_out, c_out, act=act))

        self.down = nn.ModuleList(
            double(c_in, c_out) for c_in, c_out in zip((3, *widths[:-1]), widths)
        )
        self.up = nn.ModuleList(nn.ConvTranspose2d(c, c // 2, 2, 2) for c in widths[:0:-1])
        self.merge = nn.ModuleList(double(c, c // 2) for c in widths[:0:-1])
        self.classify = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, skips[-2::-1]):
            x = merge(torch.cat((skip, up(x)), 1))
        return self.classify(x)


# ---------------------------------------------------------------------------- OCR


class DBNet(nn.Module):
    """DBNet text detector: ResNet-18 stages, FPN (1x1 laterals, nearest top-down adds,
    3x3 smoothing, all levels upsampled to 1/4 and concatenated), probability head of
    two 2x2 stride-2 transposed convs to one channel at full size, sigmoid."""

    def __init__(self, inner=256):
        super().__init__()
        from torchvision.models import resnet18

        r = resnet18(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.stages = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        self.lateral = nn.ModuleList(
            nn.Conv2d(c, inner, 1, bias=False) for c in (64, 128, 256, 512)
        )
        self.smooth = nn.ModuleList(
            nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False) for _ in range(4)
        )
        q = inner // 4
        self.head = nn.Sequential(
            ConvBnAct(inner, q, act=nn.ReLU),
            nn.ConvTranspose2d(q, q, 2, 2),
            nn.BatchNorm2d(q),
            nn.ReLU(),
            nn.ConvTranspose2d(q, 1, 2, 2),
            nn.Sigmoid(),
        )

    def forward(self, x):
        x = self.stem(x)
        features = []
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        laterals = [conv(f) for conv, f in zip(self.lateral, features)]
        for i in range(3, 0, -1):
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], scale_factor=2.0)
        maps = [
            F.interpolate(conv(f), scale_factor=float(2**i)) if i else conv(f)
            for i, (conv, f) in enumerate(zip(self.smooth, laterals))
        ]
        return self.head(torch.cat(maps[::-1], 1))


class CRNN(nn.Module):
    """CRNN text recognizer: VGG-style conv stack to a height of 1, then two
    bidirectional LSTMs over the width and a linear layer to the character classes;
    output [width steps, 1, classes]."""

    def __init__(self, classes=37, hidden=256):
        super().__init__()
        relu = nn.ReLU

        def conv(c_in, c_out, bn=False, k=3, p=1):
            layers = [nn.Conv2d(c_in, c_out, k, 1, p, bias=not bn)]
            return [*layers, nn.BatchNorm2d(c_out), relu()] if bn else [*layers, relu()]

        self.cnn = nn.Sequential(
            *conv(3, 64),
            nn.MaxPool2d(2, 2),
            *conv(64, 128),
            nn.MaxPool2d(2, 2),
            *conv(128, 256, bn=True),
            *conv(256, 256),
            nn.MaxPool2d((2, 1), (2, 1)),
            *conv(256, 512, bn=True),
            *conv(512, 512),
            nn.MaxPool2d((2, 1), (2, 1)),
            *conv(512, 512, bn=True, k=2, p=0),
        )
        self.rnn1 = nn.LSTM(512, hidden, bidirectional=True)
        self.rnn2 = nn.LSTM(2 * hidden, hidden, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        seq = self.cnn(x).squeeze(2).permute(2, 0, 1)  # [width, batch, channels]
        seq, _ = self.rnn1(seq)
        seq, _ = self.rnn2(seq)
        return self.fc(seq)
