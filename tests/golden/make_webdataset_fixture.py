#!/usr/bin/env python3
"""Writes tests/fixtures/webdataset/wds-000000.tar with webdataset's own TarWriter: the shard that
tests/data/test_shards.cpp (Shards.ReadsWebdatasetTarWriterFixture) reads through hpcnet, checking keys,
labels, boxes and pixels. Four samples, images of 8x6 pixels whose value is a formula the test
repeats, pixel (y, x) of sample k = ((x * 31 + k * 50) % 256, (y * 40 + k * 20) % 256, 90 + k):
  s000 .png + .cls 0     s001 .jpg (quality 100, 4:4:4) + .cls 1     s002 .png + .cls 2 + .json
  s003 .png + .cls 1 + .txt (two YOLO rows; the test reads this sample's rows by hand)
Run by hand (the package is only a reference for this fixture):
  python3 -m venv /tmp/wds && /tmp/wds/bin/pip install webdataset numpy pillow
  /tmp/wds/bin/python tests/golden/make_webdataset_fixture.py
"""
import io
import os

import numpy as np
import webdataset as wds
from PIL import Image

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "webdataset", "wds-000000.tar")


def pixels(k, w=8, h=6):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x * 31 + k * 50) % 256, (y * 40 + k * 20) % 256,
                     np.full_like(x, 90 + k)], axis=-1).astype(np.uint8)


def encoded(k, fmt):
    b = io.BytesIO()
    Image.fromarray(pixels(k)).save(b, format=fmt, **({"quality": 100, "subsampling": 0} if fmt == "JPEG" else {}))
    return b.getvalue()


def main():
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with wds.TarWriter(OUT) as sink:
        sink.write({"__key__": "s000", "png": encoded(0, "PNG"), "cls": 0})
        sink.write({"__key__": "s001", "jpg": encoded(1, "JPEG"), "cls": 1})
        sink.write({"__key__": "s002", "png": encoded(2, "PNG"), "cls": 2,
                    "json": {"note": "kept, unused"}})
        sink.write({"__key__": "s003", "png": encoded(3, "PNG"), "cls": 1,
                    "txt": "0 0.5 0.5 0.25 0.5\n1 0.25 0.75 0.5 0.5\n"})
    with open(os.path.join(os.path.dirname(OUT), "classes.txt"), "w") as f:
        f.write("zero\none\ntwo\n")
    print(OUT, os.path.getsize(OUT), "bytes, webdataset", getattr(wds, "__version__", "?"))


if __name__ == "__main__":
    main()
