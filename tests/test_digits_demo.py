"""The README's demo: the digits model (examples/digits, trained on scikit-learn's 8x8
digits) compiled, its C program built as the README says, printing the right digit for
every shipped image (the digit is the first character of the image's file name)."""

from __future__ import annotations

import subprocess

from aotc_testing import EXAMPLES, build_c, run_cli

DEMO = EXAMPLES / "digits"


def test_the_demo_prints_the_right_digit_for_every_image(tmp_path):
    build = tmp_path / "build"
    result = run_cli("compile", DEMO / "digits.onnx", "-o", build)
    assert result.returncode == 0, result.stderr
    program = build_c([DEMO / "main.c"], tmp_path / "digits", [build], [build / "libdigits.a"])
    images = sorted((DEMO / "images").glob("*.pgm"))
    assert len(images) == 10  # one of each digit
    printed = subprocess.run(
        [str(program), *map(str, images)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert len(printed) == len(images)
    for image, line in zip(images, printed):
        path, said = line.split(": ")
        assert path == str(image)
        assert said.split()[0] == image.name[0], line


def test_the_demo_refuses_what_is_not_a_digit_image(tmp_path):
    build = tmp_path / "build"
    assert run_cli("compile", DEMO / "digits.onnx", "-o", build).returncode == 0
    program = build_c([DEMO / "main.c"], tmp_path / "digits", [build], [build / "libdigits.a"])
    other = tmp_path / "wide.pgm"
    other.write_bytes(b"P5\n16 4\n255\n" + bytes(64))
    result = subprocess.run([program, other], check=False, capture_output=True, text=True)
    assert result.returncode == 1 and "not an 8x8 binary PGM" in result.stderr
