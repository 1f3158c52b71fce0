"""Tests for datamodules.imaging.decoding: decode_image and decode_image_bytes."""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from datamodules.imaging import decoding
from datamodules.imaging.decoding import ImageDecodeError, decode_image, decode_image_bytes
from tests import subprocesses

# Any warning raised in these tests (DeprecationWarning included) is an error.
pytestmark = pytest.mark.filterwarnings("error")

H, W = 12, 20  # deliberately not square, so rotations show in the shape


def _pixels(seed: int = 0, h: int = H, w: int = W) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _smooth(h: int = 32, w: int = 48) -> np.ndarray:
    """A smooth RGB image: lossy codecs keep it close, so rotations are easy to check."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 255 // w, y * 255 // h, (x + y) * 255 // (h + w)], axis=2).astype(np.uint8)


def _pil_rgb(path: Path) -> torch.Tensor:
    """What torchvision's pil_loader sees, as a (3, H, W) uint8 tensor."""
    with Image.open(path) as img:
        return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


def _pil_rgb_oriented(path: Path) -> torch.Tensor:
    with Image.open(path) as img:
        rgb = ImageOps.exif_transpose(img).convert("RGB")
    return torch.from_numpy(np.array(rgb)).permute(2, 0, 1)


def _hwc(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)


def _scale16(values: np.ndarray) -> np.ndarray:
    return np.round(values.astype(np.float64) / 257.0).astype(np.uint8)


def _png16_rgb(path: Path, values: np.ndarray) -> None:
    """Write a 16-bit RGB PNG by hand (Pillow cannot write one)."""
    h, w, _ = values.shape
    raw = b"".join(b"\x00" + values[r].astype(">u2").tobytes() for r in range(h))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
    path.write_bytes(png + chunk(b"IEND", b""))


def _check(image: torch.Tensor, h: int = H, w: int = W) -> None:
    assert image.dtype == torch.uint8
    assert image.shape == (3, h, w)
    assert image.is_contiguous()


# --------------------------------------------------------------------------- decode_image


LOSSLESS = {
    "png_rgb": ("x.png", "RGB", "PNG", {}),
    "png_l": ("x.png", "L", "PNG", {}),
    "png_p": ("x.png", "P", "PNG", {}),
    "png_1": ("x.png", "1", "PNG", {}),
    "png_la": ("x.png", "LA", "PNG", {}),
    "bmp_rgb": ("x.bmp", "RGB", "BMP", {}),
    "bmp_p": ("x.bmp", "P", "BMP", {}),
    "tiff_rgb": ("x.tiff", "RGB", "TIFF", {}),
    "tiff_l": ("x.tif", "L", "TIFF", {}),
    "tiff_cmyk": ("x.tif", "CMYK", "TIFF", {}),
    "tiff_lzw": ("x.tif", "RGB", "TIFF", {"compression": "tiff_lzw"}),
    "ppm": ("x.ppm", "RGB", "PPM", {}),
    "pgm": ("x.pgm", "L", "PPM", {}),
    "gif": ("x.gif", "P", "GIF", {}),
    "webp_lossless": ("x.webp", "RGB", "WEBP", {"lossless": True}),
}


@pytest.mark.parametrize("case", sorted(LOSSLESS))
def test_lossless_formats_equal_pil_rgb(tmp_path, case):
    name, mode, fmt, options = LOSSLESS[case]
    path = tmp_path / name
    Image.fromarray(_pixels()).convert(mode).save(path, fmt, **options)
    image = decode_image(path)
    _check(image)
    assert torch.equal(image, _pil_rgb(path))


@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK"])
def test_jpeg_matches_pil(tmp_path, mode):
    path = tmp_path / "x.jpg"
    Image.fromarray(_smooth()).convert(mode).save(path, "JPEG", quality=90)
    image = decode_image(str(path))
    _check(image, 32, 48)
    # Both use libjpeg-turbo (separate builds): allow a rounding step of difference.
    assert (image.int() - _pil_rgb(path).int()).abs().max() <= 2


def test_lossy_webp_close_to_source(tmp_path):
    path = tmp_path / "x.webp"
    Image.fromarray(_smooth()).save(path, "WEBP", quality=95)
    image = decode_image(path)
    _check(image, 32, 48)
    assert (image.float() - _hwc(_smooth()).float()).abs().mean() < 4


def test_channels_last_layout(tmp_path):
    for name, fmt in [("x.png", "PNG"), ("x.bmp", "BMP")]:  # TorchCodec and Pillow paths
        path = tmp_path / name
        Image.fromarray(_pixels()).save(path, fmt)
        image = decode_image(path, channels_last=True)
        assert image.shape == (3, H, W)
        assert image.stride() == (1, 3 * W, 3)
        assert torch.equal(image, decode_image(path))


@pytest.mark.parametrize("fmt,name", [("PNG", "x.png"), ("WEBP", "x.webp"), ("TIFF", "x.tif")])
def test_alpha_is_dropped_not_composited(tmp_path, fmt, name):
    rgba = np.random.default_rng(1).integers(0, 256, (H, W, 4), dtype=np.uint8)
    rgba[0, 0, 3] = 0  # fully transparent pixel keeps its stored colour
    path = tmp_path / name
    options = {"lossless": True, "exact": True} if fmt == "WEBP" else {}
    Image.fromarray(rgba, "RGBA").save(path, fmt, **options)
    image = decode_image(path)
    _check(image)
    assert torch.equal(image, _hwc(rgba[:, :, :3]))


def test_palette_with_transparency(tmp_path):
    path = tmp_path / "x.png"
    Image.fromarray(_pixels()).convert("P").save(path, transparency=0)
    assert torch.equal(decode_image(path), _pil_rgb(path))


def test_animated_gif_and_webp_give_first_frame(tmp_path):
    frames = [Image.fromarray(_pixels(0)), Image.fromarray(_pixels(1))]
    for name, options in [("x.gif", {}), ("x.webp", {"lossless": True})]:
        path = tmp_path / name
        frames[0].save(path, save_all=True, append_images=frames[1:], **options)
        image = decode_image(path)
        _check(image)
        with Image.open(path) as img:
            first = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)
        assert torch.equal(image, first)


def test_16bit_gray_png_is_scaled_not_clipped(tmp_path):
    values = np.random.default_rng(2).integers(0, 65536, (H, W), dtype=np.uint16)
    values[0, :4] = [0, 300, 32768, 65535]
    path = tmp_path / "x.png"
    Image.fromarray(values).save(path)
    with Image.open(path) as img:
        assert img.mode == "I;16"
    image = decode_image(path)
    _check(image)
    expected = torch.from_numpy(_scale16(values))
    assert torch.equal(image, expected.expand(3, -1, -1))
    assert image[0, 0, :4].tolist() == [0, 1, 128, 255]


def test_16bit_rgb_png_is_scaled(tmp_path):
    values = np.random.default_rng(3).integers(0, 65536, (H, W, 3), dtype=np.uint16)
    path = tmp_path / "x.png"
    _png16_rgb(path, values)
    image = decode_image(path)
    _check(image)
    assert torch.equal(image, _hwc(_scale16(values)))


def test_16bit_tiff_and_pgm_are_scaled(tmp_path):
    values = np.random.default_rng(4).integers(0, 65536, (H, W), dtype=np.uint16)
    values[0, :3] = [0, 32768, 65535]
    expected = torch.from_numpy(_scale16(values)).expand(3, -1, -1)
    tiff, pgm = tmp_path / "x.tif", tmp_path / "x.pgm"
    Image.fromarray(values).save(tiff)
    pgm.write_bytes(f"P5\n{W} {H}\n65535\n".encode() + values.astype(">u2").tobytes())
    for path in (tiff, pgm):
        image = decode_image(path)
        _check(image)
        assert torch.equal(image, expected)


def test_content_is_sniffed_not_extension(tmp_path):
    png_named_jpg = tmp_path / "x.jpg"
    Image.fromarray(_pixels()).save(png_named_jpg, "PNG")
    bmp_named_png = tmp_path / "y.png"
    Image.fromarray(_pixels()).save(bmp_named_png, "BMP")
    assert torch.equal(decode_image(png_named_jpg), _hwc(_pixels()))
    assert torch.equal(decode_image(bmp_named_png), _hwc(_pixels()))


def _save_oriented(path: Path, fmt: str, orientation: int) -> None:
    img = Image.fromarray(_smooth())
    if fmt == "TIFF":
        img.save(path, fmt, tiffinfo={0x0112: orientation})
        return
    exif = Image.Exif()
    exif[0x0112] = orientation
    options = {"quality": 95} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    img.save(path, fmt, exif=exif.tobytes(), **options)


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_exif_orientation_matches_pil_exif_transpose(tmp_path, fmt, orientation):
    path = tmp_path / f"x.{fmt.lower()}"
    _save_oriented(path, fmt, orientation)
    image = decode_image(path)
    expected = _pil_rgb_oriented(path)
    swapped = orientation >= 5
    _check(image, *((48, 32) if swapped else (32, 48)))
    assert expected.shape == image.shape
    assert (image.int() - expected.int()).abs().max() <= (2 if fmt == "JPEG" else 0)


def test_exif_orientation_6_rotates_jpeg_clockwise(tmp_path):
    plain, rotated = tmp_path / "plain.jpg", tmp_path / "rotated.jpg"
    Image.fromarray(_smooth()).save(plain, quality=95)
    _save_oriented(rotated, "JPEG", 6)
    upright = decode_image(plain)
    image = decode_image(rotated)
    assert upright.shape == (3, 32, 48) and image.shape == (3, 48, 32)
    clockwise = torch.rot90(upright, k=-1, dims=(1, 2))
    assert (image.int() - clockwise.int()).abs().max() <= 2
    # The stored top-left corner (dark) ends up top-right after a clockwise turn.
    assert image[:, 0, -1].sum() < image[:, 0, 0].sum()


def _jpeg_bytes() -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(_smooth(64, 64)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


BAD_FILES = {
    "truncated_jpeg": ("bad.jpg", lambda: _jpeg_bytes()[: len(_jpeg_bytes()) // 2], "truncated"),
    "jpeg_missing_eoi": ("bad.jpg", lambda: _jpeg_bytes()[:-2], "truncated"),
    "zero_bytes": ("empty.jpg", lambda: b"", "empty"),
    "random_bytes": ("noise.jpg", lambda: os.urandom(2048), "Pillow"),
    "jpeg_header_only": ("head.jpg", lambda: b"\xff\xd8\xff\xe0" + os.urandom(64), "JPEG"),
    "text_as_png": ("text.png", lambda: b"hello, world\n" * 10, "Pillow"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_raise_image_decode_error(tmp_path, case):
    name, make, cause = BAD_FILES[case]
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(ImageDecodeError) as info:
        decode_image(path)
    error = info.value
    assert isinstance(error, OSError)
    assert str(path) in str(error) and error.path == str(path)
    assert cause in str(error)
    assert ".cpp:" not in str(error)  # TorchCodec's source location is stripped


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "WEBP", "BMP", "TIFF", "PPM"])
def test_truncated_files_raise(tmp_path, fmt):
    path = tmp_path / f"x.{fmt.lower()}"
    Image.fromarray(_pixels(5, 40, 40)).save(path, fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])
    with pytest.raises(ImageDecodeError, match="x\\."):
        decode_image(path)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP"])
def test_bytes_decode_to_the_pixels_of_the_file(tmp_path, fmt):
    path = tmp_path / f"x.{fmt.lower()}"
    Image.fromarray(_smooth()).save(path, fmt)
    data = path.read_bytes()
    for buffer in (data, bytearray(data), memoryview(data)):
        for layout in (False, True):
            image = decode_image_bytes(buffer, channels_last=layout)
            expected = decode_image(path, channels_last=layout)
            assert torch.equal(image, expected) and image.stride() == expected.stride()


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_bytes_raise_naming_what_they_are(case):
    _, make, cause = BAD_FILES[case]
    with pytest.raises(ImageDecodeError) as info:
        decode_image_bytes(make(), name="shard-0.tar: key 'a/b' (jpg)")
    assert "shard-0.tar: key 'a/b' (jpg)" in str(info.value) and cause in str(info.value)


def test_missing_file_and_directory_raise(tmp_path):
    with pytest.raises(ImageDecodeError, match="No such file"):
        decode_image(tmp_path / "missing.jpg")
    with pytest.raises(ImageDecodeError, match="directory"):
        decode_image(tmp_path)


def test_decode_error_survives_dataloader_reraise_and_pickle():
    error = ImageDecodeError.for_file("/data/x.jpg", "file is empty (0 bytes)")
    # torch's ExceptionWrapper.reraise rebuilds the exception from one message string.
    assert str(type(error)("worker message")) == "worker message"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.reason, str(copy)) == (error.path, error.reason, str(error))


def test_no_deprecation_warning_in_a_fresh_interpreter(tmp_path):
    jpg, png, bmp = tmp_path / "a.jpg", tmp_path / "b.png", tmp_path / "c.bmp"
    for path in (jpg, png, bmp):
        Image.fromarray(_pixels()).save(path)
    # Load the module from its file (not through the package's __init__), then decode: any
    # DeprecationWarning from importing TorchCodec/Pillow or from decoding fails the run.
    module_file = Path(__file__).resolve().parents[3] / "datamodules" / "imaging" / "decoding.py"
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('image_io', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "for p in sys.argv[2:]: assert module.decode_image(p).shape == (3, 12, 20)\n"
    )
    paths = [str(module_file), str(jpg), str(png), str(bmp)]
    result = subprocesses.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code, *paths],
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("readv", [True, False], ids=["readv", "read"])
def test_read_image_file_gives_the_exact_bytes_and_names_what_it_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readv: bool
) -> None:
    """``os.readv`` where the platform has it, ``os.read`` where not: the same bytes, and an
    error naming the path and the cause for a missing file or a folder."""
    if not readv:
        monkeypatch.setattr(decoding, "_readv", None)
    body = bytes(range(256)) * 700  # 179,200 bytes: past the 64 KiB of a trailing read
    (tmp_path / "a.jpg").write_bytes(body)
    (tmp_path / "empty.jpg").write_bytes(b"")
    got = decoding.read_image_file(str(tmp_path / "a.jpg"))
    assert type(got) is bytearray and got == body
    assert decoding.read_image_file(str(tmp_path / "empty.jpg")) == bytearray()
    missing = tmp_path / "missing.jpg"
    with pytest.raises(ImageDecodeError, match=rf"{missing}.*cannot read file: No such file"):
        decoding.read_image_file(str(missing))
    with pytest.raises(ImageDecodeError, match=rf"{tmp_path}.*cannot read file: Is a directory"):
        decoding.read_image_file(str(tmp_path))


@pytest.mark.parametrize("readv", [True, False], ids=["readv", "read"])
def test_read_image_scratch_gives_the_exact_bytes_in_one_reused_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readv: bool
) -> None:
    """The bytes of each file, in one buffer that the thread's next read reuses; a larger file
    gets a new buffer (the last view still holds its bytes); errors name the path."""
    if not readv:
        monkeypatch.setattr(decoding, "_readv", None)
    monkeypatch.setattr(decoding, "_scratch", decoding.threading.local())
    small, other = bytes(range(256)) * 10, bytes(range(255, -1, -1)) * 12
    large = bytes(range(256)) * 5000  # 1.28 MB: past the first buffer's 1 MiB
    for name, body in (("small.jpg", small), ("other.jpg", other), ("large.jpg", large)):
        (tmp_path / name).write_bytes(body)
    (tmp_path / "empty.jpg").write_bytes(b"")
    first = decoding.read_image_scratch(str(tmp_path / "small.jpg"))
    assert type(first) is memoryview and first == small
    second = decoding.read_image_scratch(str(tmp_path / "other.jpg"))
    assert second == other and second.obj is first.obj  # the same buffer
    assert first[: len(other)] == other[: len(small)]  # overwritten: valid until the next read
    grown = decoding.read_image_scratch(str(tmp_path / "large.jpg"))
    assert grown == large and grown.obj is not first.obj and second == other
    assert decoding.read_image_scratch(str(tmp_path / "empty.jpg")) == b""
    missing = tmp_path / "missing.jpg"
    with pytest.raises(ImageDecodeError, match=rf"{missing}.*cannot read file: No such file"):
        decoding.read_image_scratch(str(missing))
    with pytest.raises(ImageDecodeError, match=rf"{tmp_path}.*cannot read file: Is a directory"):
        decoding.read_image_scratch(str(tmp_path))


def test_read_image_scratch_gives_large_and_growing_files_a_buffer_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file over ``SCRATCH_LIMIT`` is not kept in the scratch buffer, and a file longer than
    its ``fstat`` size (it grew in between) is read whole."""
    monkeypatch.setattr(decoding, "_scratch", decoding.threading.local())
    body = bytes(range(256)) * 40
    path = tmp_path / "a.jpg"
    path.write_bytes(body)
    scratch = decoding.read_image_scratch(str(path))
    monkeypatch.setattr(decoding, "SCRATCH_LIMIT", 1000)
    own = decoding.read_image_scratch(str(path))
    assert own == body and own.obj is not scratch.obj
    monkeypatch.setattr(decoding, "SCRATCH_LIMIT", 16 << 20)
    real_fstat = os.fstat

    class Shorter:
        st_size = len(body) - 100

    monkeypatch.setattr(decoding.os, "fstat", lambda fd: Shorter if fd > 2 else real_fstat(fd))
    grown = decoding.read_image_scratch(str(path))
    assert grown == body and grown.obj is not scratch.obj


def test_read_image_scratch_keeps_one_buffer_a_thread(tmp_path: Path) -> None:
    """Two threads' reads do not overwrite each other's bytes."""
    import threading

    (tmp_path / "a.jpg").write_bytes(b"a" * 5000)
    (tmp_path / "b.jpg").write_bytes(b"b" * 5000)
    mine = decoding.read_image_scratch(str(tmp_path / "a.jpg"))
    theirs = []
    thread = threading.Thread(
        target=lambda: theirs.append(bytes(decoding.read_image_scratch(str(tmp_path / "b.jpg"))))
    )
    thread.start()
    thread.join(30)
    assert theirs == [b"b" * 5000] and mine == b"a" * 5000


def test_a_writable_memoryview_is_decoded_in_place_and_left_as_it_was(tmp_path: Path) -> None:
    """``decode_image_bytes`` takes a writable view of bytes without copying it (a read-only
    one is copied): the same pixels as the file's, the bytes unchanged."""
    path = tmp_path / "x.jpg"
    Image.fromarray(_smooth()).save(path, "JPEG")
    data = path.read_bytes()
    buffer = bytearray(b"\0" * 7 + data + b"\0" * 5)
    view = memoryview(buffer)[7 : 7 + len(data)]
    assert decoding._writable_bytes(view) and not decoding._writable_bytes(memoryview(data))
    assert not decoding._writable_bytes(memoryview(buffer).cast("B", (len(buffer),))[::2])
    assert torch.equal(decode_image_bytes(view), decode_image(path))
    assert buffer == b"\0" * 7 + data + b"\0" * 5


# --------------------------------------------------------------------------- JPEG via simplejpeg


def _photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients with noise on top: every DCT frequency and both chroma planes busy."""
    noise = np.random.default_rng(seed).integers(-40, 41, (h, w, 3))
    return np.clip(_smooth(h, w).astype(np.int64) + noise, 0, 255).astype(np.uint8)


def _jpeg(pixels: np.ndarray, **options: object) -> bytearray:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", **options)
    return bytearray(buffer.getvalue())


def _torchcodec_rgb(data: bytearray) -> torch.Tensor:
    from torchcodec.decoders import decode_jpeg

    return decode_jpeg(torch.frombuffer(data, dtype=torch.uint8), mode="RGB")


JPEG_KINDS = {
    "444": (_photo(37, 53), {"subsampling": 0, "quality": 95}),
    "422": (_photo(37, 53, 1), {"subsampling": 1, "quality": 90}),
    "420": (_photo(37, 53, 2), {"subsampling": 2, "quality": 75}),
    "progressive": (_photo(64, 48, 3), {"progressive": True, "quality": 85}),
    "optimized": (_photo(17, 100, 4), {"optimize": True, "quality": 60}),
    "gray": (_photo(40, 30, 5)[..., 0], {"quality": 90}),
    "one_pixel": (_photo(1, 1, 6), {}),
    "large_odd": (_photo(601, 803, 7), {"quality": 90}),
}


@pytest.mark.parametrize("kind", sorted(JPEG_KINDS))
def test_jpegs_decode_through_simplejpeg_to_torchcodecs_pixels(kind: str) -> None:
    """Baseline, progressive, optimised, 4:4:4 / 4:2:2 / 4:2:0 and grayscale JPEGs take the
    simplejpeg path and give exactly TorchCodec's pixels, in both layouts."""
    pixels, options = JPEG_KINDS[kind]
    data = _jpeg(pixels, **options)
    expected = _torchcodec_rgb(data)
    direct = decoding._decode_simplejpeg(data)
    assert direct is not None and torch.equal(direct, expected)
    for layout in (False, True):
        image = decode_image_bytes(data, channels_last=layout)
        assert torch.equal(image, expected)
        assert image.is_contiguous() if not layout else image.permute(1, 2, 0).is_contiguous()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_simplejpeg_applies_the_exif_orientation_as_torchcodec_does(
    tmp_path: Path, orientation: int
) -> None:
    path = tmp_path / "x.jpg"
    _save_oriented(path, "JPEG", orientation)
    data = bytearray(path.read_bytes())
    direct = decoding._decode_simplejpeg(data)
    assert direct is not None and torch.equal(direct, _torchcodec_rgb(data))
    assert torch.equal(decode_image(path), _torchcodec_rgb(data).contiguous())


def test_jpegs_simplejpeg_leaves_go_to_torchcodec(monkeypatch: pytest.MonkeyPatch) -> None:
    """CMYK, a truncated file, a header the marker parser cannot read, and every JPEG when
    simplejpeg is not installed: TorchCodec decodes (or names the error) as before."""
    buffer = io.BytesIO()
    Image.fromarray(_photo(20, 30)).convert("CMYK").save(buffer, "JPEG", quality=90)
    cmyk = bytearray(buffer.getvalue())
    assert decoding._decode_simplejpeg(cmyk) is None
    assert torch.equal(decode_image_bytes(cmyk), _torchcodec_rgb(cmyk).contiguous())
    plain = _jpeg(_photo(20, 30, 1))
    assert decoding._decode_simplejpeg(plain[:-2]) is None  # no end marker: a warning
    with pytest.raises(ImageDecodeError, match="TorchCodec JPEG decoder"):
        decode_image_bytes(plain[:-2])
    assert decoding._decode_simplejpeg(bytearray(b"\xff\xd8\xff\xe0") + bytes(64)) is None
    monkeypatch.setattr(decoding, "_simplejpeg", False)
    assert decoding._decode_simplejpeg(plain) is None
    assert torch.equal(decode_image_bytes(plain), _torchcodec_rgb(plain).contiguous())
