"""The demo dataset's pictures: one large shape per image (its class), drawn anti-aliased over a noisy
low-frequency background in a random colour, size, position and rotation, with thin distractor strokes; every
nuisance comes from the caller's RNG (`lightning_lars.data.demo` seeds one per image).

Imports ``core``.
"""

import math

import numpy as np
from PIL import Image, ImageDraw

from lightning_lars.core.errors import UserError

SUPERSAMPLE = 4  # masks are drawn at 4x the stored size, then box-filtered down: anti-aliased edges


def _regular_polygon(num_vertices, radius=1.0, phase=0.0):
    angles = phase + 2 * math.pi * np.arange(num_vertices) / num_vertices
    return [np.stack([radius * np.cos(angles), radius * np.sin(angles)], axis=1)]


def _disc(radius=1.0, centre=(0.0, 0.0)):
    points = _regular_polygon(48, radius)[0]
    return points + np.asarray(centre)


def _star():
    angles = -math.pi / 2 + math.pi * np.arange(10) / 5
    radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.42)
    return [np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)]


def _plus():
    arm = 0.3  # half-width of each bar, in shape radii
    return [
        np.array(
            [
                [-arm, -1],
                [arm, -1],
                [arm, -arm],
                [1, -arm],
                [1, arm],
                [arm, arm],
                [arm, 1],
                [-arm, 1],
                [-arm, arm],
                [-1, arm],
                [-1, -arm],
                [-arm, -arm],
            ],
            dtype=float,
        )
    ]


def _arrow():
    return [
        np.array(
            [[-1, -0.25], [0.15, -0.25], [0.15, -0.7], [1, 0], [0.15, 0.7], [0.15, 0.25], [-1, 0.25]],
            dtype=float,
        )
    ]


def _l_shape():
    return [np.array([[-0.8, -1], [-0.25, -1], [-0.25, 0.45], [0.8, 0.45], [0.8, 1], [-0.8, 1]], dtype=float)]


def _half_disc():
    angles = np.linspace(0, math.pi, 25)
    return [np.stack([np.cos(angles), np.sin(angles) - 0.4], axis=1)]


def _heart():
    t = np.linspace(0, 2 * math.pi, 60, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = -(13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t))
    return [np.stack([x, y + 2], axis=1) / 16.5]


# Each shape is a list of polygons in unit coordinates; later polygons are cut out (drawn with 0).
SHAPES = {  # the default 10 come first and are the most distinct; later ones add near-lookalikes
    "circle": lambda: [_disc()],
    "triangle": lambda: _regular_polygon(3, 1.0, -math.pi / 2),
    "square": lambda: _regular_polygon(4, 1.0, math.pi / 4),
    "star": _star,
    "cross": _plus,
    "ring": lambda: [_disc(), _disc(0.55)],
    "crescent": lambda: [_disc(), _disc(0.8, (0.45, -0.1))],
    "arrow": _arrow,
    "l_shape": _l_shape,
    "half_disc": _half_disc,
    "heart": _heart,
    "hexagon": lambda: _regular_polygon(6),
    "hollow_square": lambda: _regular_polygon(4, 1.0, math.pi / 4) + _regular_polygon(4, 0.6, math.pi / 4),
    "hollow_triangle": lambda: (
        _regular_polygon(3, 1.0, -math.pi / 2) + _regular_polygon(3, 0.5, -math.pi / 2)
    ),
}
MAX_CLASSES = len(SHAPES)


def class_names(num_classes):
    """The first ``num_classes`` shape names (folder names; sorted, they give the label order)."""
    if not 2 <= num_classes <= MAX_CLASSES:
        raise UserError(f"demo num_classes must be between 2 and {MAX_CLASSES}, got {num_classes}")
    return list(SHAPES)[:num_classes]


def _background(rng, size):
    """A random base colour with low-frequency variation (a bicubic-upsampled 4x4 grid) and pixel noise."""
    base = rng.integers(40, 216, size=3)
    grid = np.clip(base + rng.integers(-50, 51, size=(4, 4, 3)), 0, 255).astype(np.uint8)  # +-50 grey levels
    smooth = np.asarray(Image.fromarray(grid).resize((size, size), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0.0, 10.0, size=(size, size, 3))  # std in 8-bit grey levels
    return np.clip(smooth + noise, 0, 255)


def draw_image(shape_name, size, rng):
    """One RGB uint8 image of ``shape_name`` at ``size`` x ``size`` pixels, all nuisances drawn from ``rng``."""
    big = size * SUPERSAMPLE
    mask = Image.new("L", (big, big), 0)
    draw = ImageDraw.Draw(mask)
    radius = rng.uniform(0.28, 0.45) * big  # object radius: 28-45% of the image side
    centre = rng.uniform(radius * 0.8, big - radius * 0.8, size=2)
    angle = rng.uniform(0, 2 * math.pi)
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    for polygon_index, polygon in enumerate(SHAPES[shape_name]()):
        points = polygon @ rotation.T * radius + centre
        draw.polygon([tuple(p) for p in points], fill=255 if polygon_index == 0 else 0)
    alpha = np.asarray(mask.resize((size, size), Image.BOX), dtype=np.float32)[..., None] / 255.0

    image = _background(rng, size)
    # Foreground: a random colour with a mild gradient, far enough from the local background to be seen.
    colour = rng.integers(0, 256, size=3).astype(np.float32)
    local_background = (image * alpha).sum((0, 1)) / max(alpha.sum(), 1.0)
    if np.abs(colour - local_background).sum() < 150:  # sum of |RGB difference|, 8-bit levels
        colour = 255.0 - local_background
    ramp = np.linspace(-25, 25, size, dtype=np.float32)[None, :, None] * rng.choice([-1, 1])
    image = image * (1 - alpha) + np.clip(colour + ramp, 0, 255) * alpha

    # Distractors: a few thin strokes in random colours, drawn over everything.
    canvas = Image.fromarray(image.astype(np.uint8))
    strokes = ImageDraw.Draw(canvas)
    for _ in range(rng.integers(0, 3)):
        x0, y0, x1, y1 = rng.uniform(0, size, size=4)
        strokes.line([(x0, y0), (x1, y1)], fill=tuple(int(c) for c in rng.integers(0, 256, 3)), width=1)
    return np.asarray(canvas)
