"""Sample inputs shipped with deploy, so a first `deploy infer` needs no file of its own
(ATTRIBUTION.txt says where each comes from and under which licence)."""

from __future__ import annotations

from pathlib import Path

PHOTO = Path(__file__).with_name("china.jpg")  # a temple: ImageNet's "palace", then "monastery"
PHOTOS = (PHOTO, Path(__file__).with_name("flower.jpg"))
