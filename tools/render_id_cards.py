#!/usr/bin/env python3
"""Renders synthetic ID cards with known text: the OCR pipeline's acceptance data (issue #46).

Each card is a light 640x400 image: a coloured band with the title IDENTITY CARD, a photo box on
the right, and four lines of ASCII text,

    Name: Maria Keller
    ID No: K4821-7730-15
    Born: 1987-03-14
    Address: 12 Harbour Street, Kiel

their values drawn by a seeded RNG from small built-in lists, in one of Debian's DejaVu fonts
(fonts-dejavu-core, which scripts/bootstrap installs) at 24-34 px, with mild Gaussian pixel
noise and a slight blur; a chosen fraction of the cards is turned 180 degrees. Nothing depends on
the clock or the process: the same seed gives the same bytes (with the same Pillow and numpy).

Command line (Pillow and numpy from requirements.txt, in .venv/):

    .venv/bin/python tools/render_id_cards.py --count 20 --seed 1 --rotated 0.25 --out DIR
        [--format png|jpg]

writes DIR/card-000.png ... and DIR/truth.json, a list with one entry per image:

    {"file": "card-000.png",
     "lines": ["IDENTITY CARD", "Name: Maria Keller", "ID No: K4821-7730-15",
               "Born: 1987-03-14", "Address: 12 Harbour Street, Kiel"],
     "fields": {"name": "Maria Keller", "id_number": "K4821-7730-15",
                "birth_date": "1987-03-14", "address": "12 Harbour Street, Kiel"},
     "rotated": false}

`lines` are the rendered lines top to bottom as the card reads upright (also when it is stored
turned 180 degrees); `rotated` says whether it is.

As a module (tests put tools/ on sys.path; nothing runs on import):

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import render_id_cards
    image, truth = render_id_cards.render_card(7, rotated=True)   # a PIL RGB image and
                                                                 # {"lines", "fields", "rotated"}

render_card takes a seed (int) or a random.Random; cards(count, seed, rotated) yields what the
command line writes, as (file stem, image, truth).
"""

import argparse
import json
import os
import random

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

WIDTH, HEIGHT = 640, 400
TITLE = "IDENTITY CARD"

# Only files that Debian 12's fonts-dejavu-core ships (dpkg -L fonts-dejavu-core).
FONT_DIR = "/usr/share/fonts/truetype/dejavu"
TEXT_FONTS = ["DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSerif.ttf"]
TITLE_FONT = "DejaVuSans-Bold.ttf"

FIRST_NAMES = ["Maria", "Jonas", "Anna", "Lukas", "Sofia", "Felix", "Clara", "Peter", "Laura",
               "Tobias", "Elena", "David", "Hanna", "Martin", "Julia", "Simon", "Nora", "Oskar"]
LAST_NAMES = ["Keller", "Schmidt", "Berger", "Hoffmann", "Vogel", "Larsen", "Novak", "Fischer",
              "Brandt", "Meyer", "Jensen", "Wagner", "Koch", "Richter", "Lang", "Weber"]
STREETS = ["Harbour Street", "Mill Lane", "Station Road", "Oak Avenue", "Church Street",
           "Market Square", "River Road", "Garden Way", "North Street", "Castle Hill"]
CITIES = ["Kiel", "Bremen", "Lyon", "Graz", "Basel", "Leeds", "Malmo", "Turku", "Porto", "Ghent"]
ID_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"  # no I or O, which read as 1 and 0

# Each field as the card labels it; `lines` are TITLE followed by these in order.
FIELDS = [("name", "Name"), ("id_number", "ID No"), ("birth_date", "Born"),
          ("address", "Address")]


def draw_fields(rng):
    """The four field values for one card, each a string: {name, id_number, birth_date,
    address}."""
    year, month, day = rng.randint(1950, 2005), rng.randint(1, 12), rng.randint(1, 28)
    return {
        "name": f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}",
        "id_number": f"{rng.choice(ID_LETTERS)}{rng.randint(1000, 9999)}-"
                     f"{rng.randint(0, 9999):04d}-{rng.randint(0, 99):02d}",
        "birth_date": f"{year:04d}-{month:02d}-{day:02d}",
        "address": f"{rng.randint(1, 199)} {rng.choice(STREETS)}, {rng.choice(CITIES)}",
    }


def _font(name, size):
    return ImageFont.truetype(os.path.join(FONT_DIR, name), size)


def render_card(seed_or_rng, rotated=False, noise=True):
    """One card: (PIL RGB image of WIDTH x HEIGHT, {"lines", "fields", "rotated"}).

    seed_or_rng: an int seed or a random.Random (drawn from, so a caller's sequence moves on).
    rotated: turn the finished card 180 degrees (truth's lines stay in upright reading order).
    noise: Gaussian pixel noise (sigma 2-6 levels) and a blur of radius 0-0.6 px; off gives the
    clean rendering.
    """
    rng = seed_or_rng if isinstance(seed_or_rng, random.Random) else random.Random(seed_or_rng)
    fields = draw_fields(rng)
    lines = [TITLE] + [f"{label}: {fields[key]}" for key, label in FIELDS]

    # Light paper and a darker band of the same hue; dark ink, so contrast stays high.
    hue = rng.choice([(225, 235, 245), (235, 245, 230), (245, 238, 225), (240, 232, 242)])
    paper = tuple(min(255, c + rng.randint(5, 12)) for c in hue)
    band = tuple(c - 60 for c in hue)
    ink = tuple(rng.randint(0, 40) for _ in range(3))
    card = Image.new("RGB", (WIDTH, HEIGHT), paper)
    draw = ImageDraw.Draw(card)

    band_height = 64
    draw.rectangle([0, 0, WIDTH, band_height], fill=band)
    title_font = _font(TITLE_FONT, rng.randint(30, 34))
    top, bottom = title_font.getbbox(TITLE)[1], title_font.getbbox(TITLE)[3]
    draw.text((24, (band_height - (top + bottom)) // 2), TITLE, font=title_font, fill=(255,) * 3)

    # The photo box: plain, so it holds no text for a detector to find.
    photo = [WIDTH - 150, band_height + 40, WIDTH - 30, band_height + 190]
    draw.rectangle(photo, fill=tuple(c - 25 for c in paper), outline=band, width=2)

    # Field lines left-aligned under the band, one font for the card; a line that would run off
    # the card takes the size down (never below 22 px).
    face = rng.choice(TEXT_FONTS)
    size = rng.randint(24, 30)
    margin = 28
    while size > 22 and max(_font(face, size).getlength(line) for line in lines[1:]) > \
            WIDTH - 2 * margin:
        size -= 1
    font = _font(face, size)
    ascent, descent = font.getmetrics()
    step = ascent + descent + rng.randint(18, 28)
    y = band_height + 30
    for line in lines[1:]:
        draw.text((margin, y), line, font=font, fill=ink)
        y += step

    if noise:
        card = card.filter(ImageFilter.GaussianBlur(rng.uniform(0.0, 0.6)))
        pixels = np.asarray(card, dtype=np.float32)  # [HEIGHT, WIDTH, 3]
        noise_rng = np.random.default_rng(rng.getrandbits(64))
        pixels += noise_rng.normal(0.0, rng.uniform(2.0, 6.0), pixels.shape)
        card = Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), "RGB")
    if rotated:
        card = card.rotate(180)
    return card, {"lines": lines, "fields": fields, "rotated": bool(rotated)}


def cards(count, seed, rotated=0.0, noise=True):
    """(stem, image, truth) for cards 0..count-1 of `seed`; exactly round(count * rotated) of
    them, chosen by the seed, are turned 180 degrees. Card i's content depends only on seed and
    i, not on count or rotated."""
    chosen = set(random.Random(f"rotated-{seed}").sample(range(count), round(count * rotated)))
    for i in range(count):
        image, truth = render_card(random.Random(f"card-{seed}-{i}"), i in chosen, noise)
        yield f"card-{i:03d}", image, truth


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20, help="cards to write (default 20)")
    parser.add_argument("--seed", type=int, default=1, help="the seed (default 1)")
    parser.add_argument("--rotated", type=float, default=0.0,
                        help="fraction of the cards turned 180 degrees (default 0)")
    parser.add_argument("--format", choices=["png", "jpg"], default="png")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    parser.add_argument("--no-noise", action="store_true", help="no pixel noise or blur")
    parser.add_argument("--out", required=True, help="directory to write into")
    args = parser.parse_args()
    if args.count < 0 or not 0.0 <= args.rotated <= 1.0:
        parser.error("--count must be >= 0 and --rotated within [0, 1]")

    os.makedirs(args.out, exist_ok=True)
    truth = []
    for stem, image, card_truth in cards(args.count, args.seed, args.rotated, not args.no_noise):
        name = f"{stem}.{args.format}"
        if args.format == "jpg":
            image.save(os.path.join(args.out, name), "JPEG", quality=args.quality)
        else:
            image.save(os.path.join(args.out, name), "PNG")
        truth.append({"file": name, **card_truth})
    with open(os.path.join(args.out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    print(f"wrote {len(truth)} cards and truth.json to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
