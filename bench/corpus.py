"""The benchmark corpus: real architectures built from packages, as users export them.

`CORPUS` maps a model name to an `Entry`: its category, a source (a torch module with
example inputs, or a fitted scikit-learn estimator with its input shape) and the
exporter that turns the source into ONNX:

- "torchscript": torch.onnx.export(dynamo=False), opset 17, constants folded;
- "dynamo": torch.onnx.export(dynamo=True), opset 18 (its lowest), onnxscript-optimized;
  entries named NAME_dynamo are NAME through this exporter;
- "sklearn": skl2onnx, opsets up to 17 and ai.onnx.ml 3 (it writes the lowest its ops
  need), probabilities as a tensor (no ZipMap).

Every model has random weights drawn after seeding with SEED (torchvision `weights=None`,
transformers models from a Config object, scikit-learn fitted on generated data), fixed
input shapes with batch 1 (scikit-learn: 64 rows), and IR version <= MAX_IR_VERSION.
Batch norms get random affine parameters and the statistics of their input on random
data (corpus_nets.calibrate_batch_norms), so that deep random networks stay in range.

`load(name)` builds a model once and caches it as CACHE_DIR/NAME.onnx (git-ignored);
delete the file to rebuild it.  Building needs the `bench` extra (pip install
'.[bench]'); this module imports torch, transformers and scikit-learn only inside the
builders, so the table reads without them.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

CACHE_DIR = Path(__file__).resolve().parent / ".corpus"
SEED = 0
TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18
SKLEARN_OPSETS = {"": 17, "ai.onnx.ml": 3}
MAX_IR_VERSION = 10  # onnx 1.23 writes IR 14 by default, newer than onnxruntime 1.32 loads
SKLEARN_BATCH = 64
SKLEARN_FEATURES = 20
SEQ = 128  # tokens per sequence of the text transformers

CATEGORIES = (
    "classification",
    "detection",
    "segmentation",
    "ocr",
    "speech",
    "nlp",
    "vision-transformer",
    "sklearn",
)


@dataclass(frozen=True)
class Entry:
    category: str
    # torch: () -> (module, {input name: example tensor}); sklearn: () -> (estimator, shape)
    source: Callable[[], tuple[Any, Any]]
    exporter: str = "torchscript"


# ---------------------------------------------------------------------------- torch sources


def _vision(factory: Callable[[], Any], size: int | tuple[int, int] = 224, name: str = "input"):
    """A convolutional network on a [1, 3, H, W] image, its batch norms calibrated."""

    def source():
        import torch
        from corpus_nets import calibrate_batch_norms, randomize_zero_weights

        h, w = (size, size) if isinstance(size, int) else size
        model = factory().eval()
        image = torch.rand(1, 3, h, w)
        randomize_zero_weights(model)
        calibrate_batch_norms(model, image)
        return model, {name: image}

    return source


def _torchvision(arch: str, **kwargs) -> Callable[[], Any]:
    def factory():
        import torchvision

        return torchvision.models.get_model(arch, weights=None, **kwargs)

    return factory


def _segmentation(arch: str) -> Callable[[], Any]:
    """A torchvision segmentation model, its {"out": ...} dict made a tensor."""

    def factory():
        from corpus_nets import Outputs

        model = _torchvision(arch, weights_backbone=None, aux_loss=False)()
        return Outputs(model, ["out"])

    return factory


def _ssdlite() -> Any:
    from corpus_nets import DetectorHead

    return DetectorHead(_torchvision("ssdlite320_mobilenet_v3_large", weights_backbone=None)())


def _net(class_name: str, **kwargs) -> Callable[[], Any]:
    """A network of corpus_nets."""

    def factory():
        import corpus_nets

        return getattr(corpus_nets, class_name)(**kwargs)

    return factory


def _transformers(
    model_class: str,
    config: Callable[[], Any],
    inputs: dict[str, Callable[[Any], Any]],
    keys: tuple[str, ...],
) -> Callable[[], Any]:
    """A transformers model from `config()` (random weights), called with the tensors
    `inputs` make from the config, returning its outputs `keys`."""

    def source():
        import transformers
        from corpus_nets import Outputs, randomize_zero_weights

        cfg = config()
        model = getattr(transformers, model_class)(cfg).eval()
        randomize_zero_weights(model)
        example = {name: make(cfg) for name, make in inputs.items()}
        return Outputs(model, list(keys), list(example)), example

    return source


def _config(class_name: str, **kwargs) -> Callable[[], Any]:
    def config():
        import transformers

        return getattr(transformers, class_name)(**kwargs)

    return config


def _token_ids(cfg) -> Any:
    import torch

    return torch.randint(cfg.vocab_size, (1, SEQ))


def _ones(cfg) -> Any:
    import torch

    return torch.ones(1, SEQ, dtype=torch.int64)


def _zeros(cfg) -> Any:
    import torch

    return torch.zeros(1, SEQ, dtype=torch.int64)


def _float(*shape: int) -> Callable[[Any], Any]:
    def make(cfg):
        import torch

        return torch.rand(*shape)

    return make


TEXT_INPUTS = {"input_ids": _token_ids, "attention_mask": _ones}

# transformers configs at the sizes of released checkpoints (random weights)
BERT_BASE = _config("BertConfig")  # 12 layers, 768 wide, 12 heads
DISTILBERT = _config("DistilBertConfig")  # 6 layers, 768 wide
GPT2_SMALL = _config("GPT2Config", use_cache=False)  # 12 layers, 768 wide, 50257 tokens
LLAMA_SMALL = _config(  # a small Llama: RoPE, RMSNorm, SwiGLU, grouped-query attention
    "LlamaConfig",
    vocab_size=32000,
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=512,
    use_cache=False,
)
WHISPER_TINY = _config(  # whisper-tiny: 4 layers, 384 wide, 80 mel bins, 1500 positions
    "WhisperConfig",
    d_model=384,
    encoder_layers=4,
    decoder_layers=4,
    encoder_attention_heads=6,
    decoder_attention_heads=6,
    encoder_ffn_dim=1536,
    decoder_ffn_dim=1536,
    num_mel_bins=80,
    max_source_positions=1500,
)
WAV2VEC2_SMALL = _config(  # wav2vec2-base's feature encoder under a 4-layer, 384-wide encoder
    "Wav2Vec2Config",
    hidden_size=384,
    num_hidden_layers=4,
    num_attention_heads=6,
    intermediate_size=1536,
)
VIT_SMALL = _config(  # ViT-S/16
    "ViTConfig",
    hidden_size=384,
    num_hidden_layers=12,
    num_attention_heads=6,
    intermediate_size=1536,
    image_size=224,
    patch_size=16,
    num_labels=1000,
)


def _whisper_encoder() -> Callable[[], Any]:
    """Only the encoder of Whisper: log-mel features [1, 80, 3000] (30 s) in."""

    def source():
        import transformers
        from corpus_nets import Outputs

        model = transformers.WhisperModel(WHISPER_TINY()).get_encoder().eval()
        example = {"input_features": _float(1, 80, 3000)(None)}
        return Outputs(model, ["last_hidden_state"], list(example)), example

    return source


# ---------------------------------------------------------------------------- sklearn sources


def _sklearn(make_estimator: Callable[[], Any], task: str, samples: int = 2000):
    """`make_estimator()` fitted on `samples` generated rows of SKLEARN_FEATURES features
    (fewer rows, fewer support vectors)."""

    def source():
        from sklearn import datasets

        if task == "classification":
            x, y = datasets.make_classification(
                n_samples=samples,
                n_features=SKLEARN_FEATURES,
                n_informative=10,
                n_classes=3,
                flip_y=0.05,
                random_state=SEED,
            )
        else:
            x, y = datasets.make_regression(
                n_samples=samples, n_features=SKLEARN_FEATURES, noise=1.0, random_state=SEED
            )
        with warnings.catch_warnings():
            # SVC(probability=True) is deprecated from scikit-learn 1.9 (removed in 1.11)
            warnings.simplefilter("ignore", FutureWarning)
            estimator = make_estimator().fit(x.astype(np.float32), y)
        return estimator, [SKLEARN_BATCH, SKLEARN_FEATURES]

    return source


def _sk(make: Callable[[Any], Any]) -> Callable[[], Any]:
    """An estimator `make(sk)` builds from the scikit-learn names in `sk`."""

    def estimator():
        from types import SimpleNamespace

        from sklearn import (
            decomposition,
            ensemble,
            linear_model,
            neighbors,
            neural_network,
            pipeline,
            preprocessing,
            svm,
        )

        modules = (decomposition, ensemble, linear_model, neighbors, neural_network, svm)
        names = {n: getattr(m, n) for m in modules for n in m.__all__}
        return make(
            SimpleNamespace(
                **names, pipe=pipeline.make_pipeline, scaler=preprocessing.StandardScaler
            )
        )

    return estimator


# name -> (task, training rows, estimator from the names of _sk); the SVCs' rows are
# chosen for about 500 support vectors
SKLEARN_MODELS: dict[str, tuple[str, int, Callable[[Any], Any]]] = {
    "sk_scaler_logreg": (
        "classification",
        2000,
        lambda sk: sk.pipe(sk.scaler(), sk.LogisticRegression(max_iter=1000)),
    ),
    "sk_random_forest": (
        "classification",
        2000,
        lambda sk: sk.RandomForestClassifier(100, max_depth=10, random_state=SEED),
    ),
    "sk_gradient_boosting": (
        "classification",
        2000,
        lambda sk: sk.GradientBoostingClassifier(n_estimators=100, random_state=SEED),
    ),
    "sk_svc_rbf": (  # 492 support vectors
        "classification",
        600,
        lambda sk: sk.pipe(sk.scaler(), sk.SVC(probability=True, random_state=SEED)),
    ),
    "sk_svc_linear": (  # 515 support vectors
        "classification",
        800,
        lambda sk: sk.pipe(sk.scaler(), sk.SVC(kernel="linear")),
    ),
    "sk_mlp": (
        "classification",
        2000,
        lambda sk: sk.pipe(sk.scaler(), sk.MLPClassifier((128, 64), random_state=SEED)),
    ),
    "sk_pca_knn": (
        "classification",
        2000,
        lambda sk: sk.pipe(sk.PCA(10, random_state=SEED), sk.KNeighborsClassifier(5)),
    ),
    "sk_pca_ridge": (
        "regression",
        2000,
        lambda sk: sk.pipe(sk.scaler(), sk.PCA(10, random_state=SEED), sk.Ridge()),
    ),
}


# ---------------------------------------------------------------------------- exporters


def export_torchscript(source: tuple[Any, dict]) -> onnx.ModelProto:
    import torch

    module, inputs = source
    buffer = io.BytesIO()
    # not under torch.no_grad(), as users export: without autograd, nn.MultiheadAttention
    # takes a fused kernel that the TorchScript exporter has no ONNX for
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            buffer,
            dynamo=False,
            opset_version=TORCHSCRIPT_OPSET,
            input_names=list(inputs),
            do_constant_folding=True,
        )
    return onnx.load_from_string(buffer.getvalue())


def export_dynamo(source: tuple[Any, dict]) -> onnx.ModelProto:
    import torch

    module, inputs = source
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            tuple(inputs.values()),
            dynamo=True,
            opset_version=DYNAMO_OPSET,
            input_names=list(inputs),
            verbose=False,
        )
    return program.model_proto


def export_sklearn(source: tuple[Any, list[int]]) -> onnx.ModelProto:
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.base import is_classifier

    estimator, shape = source
    final = estimator.steps[-1][1] if hasattr(estimator, "steps") else estimator
    # aotc takes no ZipMap (a sequence of maps): probabilities as one float tensor
    options = {id(final): {"zipmap": False}} if is_classifier(final) else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # SVC's deprecated probA_, probB_
        return convert_sklearn(
            estimator,
            initial_types=[("input", FloatTensorType(shape))],
            target_opset=SKLEARN_OPSETS,
            options=options,
        )


EXPORTERS: dict[str, Callable[[Any], onnx.ModelProto]] = {
    "torchscript": export_torchscript,
    "dynamo": export_dynamo,
    "sklearn": export_sklearn,
}


# ---------------------------------------------------------------------------- the corpus


def _both(name: str, entry: Entry) -> dict[str, Entry]:
    """NAME through the TorchScript exporter and NAME_dynamo through the dynamo one."""
    return {name: entry, f"{name}_dynamo": Entry(entry.category, entry.source, "dynamo")}


def _classifier(arch: str, **kwargs) -> Entry:
    return Entry("classification", _vision(_torchvision(arch, **kwargs)))


CORPUS: dict[str, Entry] = {
    # image classification, torchvision, 224x224
    **_both("resnet18", _classifier("resnet18")),
    "resnet50": _classifier("resnet50"),
    "mobilenet_v2": _classifier("mobilenet_v2"),
    "mobilenet_v3_small": _classifier("mobilenet_v3_small"),
    **_both("mobilenet_v3_large", _classifier("mobilenet_v3_large")),
    **_both("efficientnet_b0", _classifier("efficientnet_b0")),
    "shufflenet_v2_x1_0": _classifier("shufflenet_v2_x1_0"),
    "squeezenet1_1": _classifier("squeezenet1_1"),
    "densenet121": _classifier("densenet121"),
    "mnasnet1_0": _classifier("mnasnet1_0"),
    "regnet_y_400mf": _classifier("regnet_y_400mf"),
    "googlenet": _classifier("googlenet", aux_logits=False, init_weights=True),
    **_both("convnext_tiny", _classifier("convnext_tiny")),
    # vision transformers
    "vit_b_16": Entry("vision-transformer", _vision(_torchvision("vit_b_16"))),
    "swin_t": Entry("vision-transformer", _vision(_torchvision("swin_t"))),
    **_both(
        "vit_s16_hf",
        Entry(
            "vision-transformer",
            _transformers(
                "ViTForImageClassification",
                VIT_SMALL,
                {"pixel_values": _float(1, 3, 224, 224)},
                ("logits",),
            ),
        ),
    ),
    # segmentation
    "deeplabv3_mobilenet_v3_large": Entry(
        "segmentation", _vision(_segmentation("deeplabv3_mobilenet_v3_large"), 512, "x")
    ),
    "lraspp_mobilenet_v3_large": Entry(
        "segmentation", _vision(_segmentation("lraspp_mobilenet_v3_large"), 512, "x")
    ),
    "fcn_resnet50": Entry("segmentation", _vision(_segmentation("fcn_resnet50"), 256, "x")),
    **_both("unet", Entry("segmentation", _vision(_net("UNet"), 256))),
    # detection: YOLOv8n with its box decoding, SSDlite without anchors and NMS
    **_both("yolov8n", Entry("detection", _vision(_net("YOLOv8", size=640), 640))),
    "ssdlite320_mobilenet_v3_large": Entry("detection", _vision(_ssdlite, 320)),
    # OCR: DBNet text detection, CRNN recognition of a 32x128 crop
    "dbnet_resnet18": Entry("ocr", _vision(_net("DBNet"), 640)),
    "crnn": Entry("ocr", _vision(_net("CRNN"), (32, 128))),
    # speech encoders
    **_both("whisper_tiny_encoder", Entry("speech", _whisper_encoder())),
    "wav2vec2_small": Entry(
        "speech",
        _transformers(
            "Wav2Vec2Model",
            WAV2VEC2_SMALL,
            {"input_values": _float(1, 16000)},  # 1 s of 16 kHz audio
            ("last_hidden_state",),
        ),
    ),
    # text transformers, sequence length SEQ
    **_both(
        "bert_base",
        Entry(
            "nlp",
            _transformers(
                "BertModel",
                BERT_BASE,
                {**TEXT_INPUTS, "token_type_ids": _zeros},
                ("last_hidden_state", "pooler_output"),
            ),
        ),
    ),
    "distilbert": Entry(
        "nlp", _transformers("DistilBertModel", DISTILBERT, TEXT_INPUTS, ("last_hidden_state",))
    ),
    # decoders with an attention mask, as for generation: without one, transformers looks
    # for packed sequences in the position ids (torch.diff, which TorchScript cannot export)
    **_both(
        "gpt2",
        Entry("nlp", _transformers("GPT2LMHeadModel", GPT2_SMALL, TEXT_INPUTS, ("logits",))),
    ),
    **_both(
        "llama_small",
        Entry("nlp", _transformers("LlamaForCausalLM", LLAMA_SMALL, TEXT_INPUTS, ("logits",))),
    ),
    # scikit-learn pipelines, SKLEARN_BATCH rows of SKLEARN_FEATURES floats
    **{
        name: Entry("sklearn", _sklearn(_sk(make), task, samples), "sklearn")
        for name, (task, samples, make) in SKLEARN_MODELS.items()
    },
}


# ---------------------------------------------------------------------------- building


def build(name: str) -> onnx.ModelProto:
    """CORPUS[name] exported, with fixed seeds."""
    entry = CORPUS[name]
    _seed()
    model = EXPORTERS[entry.exporter](entry.source())
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    return model


def _seed() -> None:
    try:
        import torch
    except ImportError:  # scikit-learn models seed themselves (random_state)
        return
    torch.manual_seed(SEED)


def load(name: str, cache_dir: Path = CACHE_DIR) -> onnx.ModelProto:
    """CORPUS[name], from cache_dir/NAME.onnx once built."""
    path = cache_dir / f"{name}.onnx"
    if not path.exists():
        model = build(name)
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        onnx.save(model, partial)
        partial.replace(path)  # a build cut short leaves no NAME.onnx behind
        return model
    return onnx.load(path)


def main(argv: list[str]) -> int:
    """python bench/corpus.py [NAME ...]: build (or find cached) and list the models."""
    names = argv or list(CORPUS)
    failed = 0
    for name in names:
        try:
            model = load(name)
        except Exception as e:  # noqa: BLE001 - an exporter failing on one model is a result
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {e}".splitlines()[0], flush=True)
            continue
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{name}: {CORPUS[name].category}, {len(model.graph.node)} nodes, {ops}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main(sys.argv[1:]))
