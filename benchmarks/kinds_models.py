"""Models as they come (benchmarks/kinds.py, tests/matrix/test_model_kinds_*.py): one per
kind of input or output that a starter config must express, and three whose forward no
export can match (noise, a branch on the data, a size computed in Python). Each is small
and built with random weights from a fixed seed: they prove the mechanics (shapes,
names, parity), not accuracy."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


class ScatterGraph(nn.Module):
    """No batch dim: node features [N, 32], edges int64 [2, E]; messages summed per node."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.out = nn.Linear(32, 8)

    def forward(self, x, edge_index):
        src, dst = edge_index[0], edge_index[1]
        messages = self.lin(x)[src]
        agg = torch.zeros_like(x).index_add(0, dst, messages)
        return self.out(torch.relu(agg + x))


def scatter_graph():
    torch.manual_seed(0)
    return ScatterGraph()


class Tagger(nn.Module):
    """A packed LSTM tagger: tokens [b, s], lengths [b]."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, tokens, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embed(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])
        return self.head(out)


def tagger():
    torch.manual_seed(0)
    return Tagger()


class TinyUNet(nn.Module):
    """A diffusion-style block: latents [b, 4, h, w] and a 0-d timestep."""

    def __init__(self):
        super().__init__()
        self.time = nn.Linear(16, 8)
        self.conv_in = nn.Conv2d(4, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.conv_out = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, sample, timestep):
        half = 8
        freqs = torch.exp(-torch.arange(half, dtype=torch.float32) * 0.5)
        args = timestep.float().reshape(1, 1) * freqs
        emb = self.time(torch.cat([torch.sin(args), torch.cos(args)], -1))
        h = self.conv_in(sample) + emb[:, :, None, None]
        a, b = torch.chunk(self.norm(h), 2, dim=1)
        return self.conv_out(torch.cat([F.silu(a), b], 1))


def tiny_unet():
    torch.manual_seed(0)
    return TinyUNet()


class Masker(nn.Module):
    """Like ViT-MAE: the forward draws a random mask."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        noise = torch.rand(x.shape[0], x.shape[1])
        keep = noise.argsort(dim=1)[:, : x.shape[1] // 2]
        kept = torch.gather(x, 1, keep[..., None].expand(-1, -1, x.shape[2]))
        return self.proj(kept).mean(1)


def masker():
    torch.manual_seed(0)
    return Masker()


class Out(NamedTuple):
    logits: torch.Tensor
    features: torch.Tensor


class NamedCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, image):
        f = torch.relu(self.conv(image)).mean((2, 3))
        return Out(self.head(f), f)


def named_cnn():
    torch.manual_seed(0)
    return NamedCNN()


class Branchy(nn.Module):
    """A Python `if` on the data."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.a(x)
        return self.b(x)


def branchy():
    torch.manual_seed(0)
    return Branchy()


class Resizer(nn.Module):
    """Resizes its input inside the model to a size computed in Python."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, image):
        h = image.shape[-1]
        scale = 160 / h
        x = F.interpolate(
            image, size=(int(image.shape[-2] * scale), int(h * scale)), mode="bilinear", align_corners=False
        )
        return self.conv(x).mean((2, 3))


def resizer():
    torch.manual_seed(0)
    return Resizer()


class Bag(nn.Module):
    """Flat indices with offsets (EmbeddingBag)."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(40, 8, mode="mean")
        self.head = nn.Linear(8, 3)

    def forward(self, indices, offsets):
        return self.head(self.bag(indices, offsets))


def bag():
    torch.manual_seed(0)
    return Bag()


def small_bert():
    """Hugging Face BertModel: two int64 inputs by keyword (token ids, an attention mask)."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(
        BertConfig(
            vocab_size=500, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    ).eval()


def llama():
    """A Llama-style decoder (grouped-query attention, RoPE) returning its DynamicCache."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaForCausalLM(cfg).eval()


def mask_rcnn():
    """Instance segmentation: a list of images in; per image boxes, labels, scores and masks
    at the image's own size out (a two-conv backbone: 35k parameters)."""
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(0)
    backbone = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
    )
    backbone.out_channels = 16
    return MaskRCNN(
        backbone,
        num_classes=None,
        min_size=64,
        max_size=128,
        rpn_anchor_generator=AnchorGenerator(((16, 32, 64),), ((0.5, 1.0, 2.0),)),
        box_roi_pool=MultiScaleRoIAlign(["0"], output_size=7, sampling_ratio=2),
        box_head=TwoMLPHead(16 * 7 * 7, 32),
        box_predictor=FastRCNNPredictor(32, 3),
        mask_roi_pool=MultiScaleRoIAlign(["0"], output_size=14, sampling_ratio=2),
        mask_head=MaskRCNNHeads(16, (16,), 1),
        mask_predictor=MaskRCNNPredictor(16, 16, 3),
        box_score_thresh=0.0,
        box_detections_per_img=20,
        rpn_pre_nms_top_n_test=100,
        rpn_post_nms_top_n_test=50,
    ).eval()


def vit_mae():
    """Hugging Face ViT-MAE: its forward draws the masking noise unless `noise` is given."""
    from transformers import ViTMAEConfig, ViTMAEModel

    torch.manual_seed(0)
    config = ViTMAEConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        mask_ratio=0.5,
    )
    return ViTMAEModel(config).eval()


def convnext():
    """Hugging Face ConvNeXt (tiny config): a BaseModelOutputWithPooling."""
    from transformers import ConvNextConfig, ConvNextModel

    torch.manual_seed(0)
    return ConvNextModel(ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)).eval()


def segformer():
    """Hugging Face SegFormer (tiny config): per-pixel logits at a quarter of the image."""
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    torch.manual_seed(0)
    config = SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        decoder_hidden_size=16,
        num_labels=4,
        mlp_ratios=[2, 2],
        strides=[4, 2],
        patch_sizes=[7, 3],
    )
    return SegformerForSemanticSegmentation(config).eval()


def whisper_encoder():
    """Hugging Face Whisper's encoder (tiny config): log-mel frames in, a BaseModelOutput."""
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(0)
    config = WhisperConfig(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=8,
        max_source_positions=16,
        vocab_size=100,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    return WhisperModel(config).get_encoder().eval()
