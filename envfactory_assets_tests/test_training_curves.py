"""The ``checkpoints`` asset's curves: SVG pictures of the per-step series TRL logged, and the Markdown around them."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET

import pytest

from envfactory_assets.reporting.training_curves import (
    checkpoint_curves_markdown,
    curve_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
# the shapes train_sft and train_grpo return (metrics of a 4-step SFT run and a 3-step GRPO run)
SFT_ROW = {
    "stage": "sft",
    "id": "ckpt_sft",
    "path": "/home/ckpt/sft",
    "metrics": {"steps": 4, "loss_history": [2.31, 1.87, 1.52, 1.49]},
}
GRPO_ROW = {
    "stage": "grpo",
    "id": "ckpt_grpo",
    "path": "/home/ckpt/grpo",
    "metrics": {
        "steps": 3,
        "reward_mean_per_step": [0.1, 0.25, 0.4],
        "reward_std_per_step": [0.05, 0.1, 0.0],
        "loss_per_step": [0.02, -0.01, 0.03],
    },
}


def _pictures(markdown: str) -> dict[str, ET.Element]:
    return {
        alt: ET.fromstring(base64.b64decode(data))
        for alt, data in re.findall(r"!\[([^\]]+)\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", markdown)
    }


def test_a_curve_has_a_dot_per_step_inside_the_picture_and_a_band_when_given():
    svg = ET.fromstring(curve_svg([0.1, 0.25, 0.4], "reward", band=[0.05, 0.1, 0.0], width=300, height=200))
    dots = svg.findall(f"{SVG}circle")
    assert len(dots) == 3
    ys = [float(d.get("cy")) for d in dots]
    assert ys[0] > ys[1] > ys[2]  # rising reward: higher on the picture (smaller y)
    assert all(0 <= float(d.get("cx")) <= 300 and 0 <= float(d.get("cy")) <= 200 for d in dots)
    assert svg.find(f"{SVG}polygon") is not None
    single = ET.fromstring(curve_svg([1.5], "one step"))  # one step: one dot, no division by zero
    assert len(single.findall(f"{SVG}circle")) == 1 and single.find(f"{SVG}polygon") is None


@pytest.mark.parametrize("values, band", [([], None), ([1.0, float("nan")], None), ([1.0, 2.0], [0.1])])
def test_a_curve_refuses_empty_non_finite_or_mismatched_input(values, band):
    with pytest.raises(ValueError, match="curve 'loss'"):
        curve_svg(values, "loss", band=band)


def test_markdown_lists_every_checkpoint_path_and_draws_each_series():
    text = checkpoint_curves_markdown([SFT_ROW, GRPO_ROW])
    assert "| SFT | `ckpt_sft` | `/home/ckpt/sft` | 4 |" in text
    assert "| SFT+GRPO | `ckpt_grpo` | `/home/ckpt/grpo` | 3 |" in text
    pictures = _pictures(text)
    assert len(pictures) == 3
    sft_loss = next(svg for alt, svg in pictures.items() if alt.startswith("SFT training loss"))
    assert len(sft_loss.findall(f"{SVG}circle")) == 4
    reward = next(svg for alt, svg in pictures.items() if alt.startswith("GRPO mean reward"))
    assert reward.find(f"{SVG}polygon") is not None  # the spread across rollouts
    assert "| SFT training loss per step | 4 | 2.31 | 1.49 | 1.49 | 2.31 |" in text


def test_markdown_names_a_series_with_no_logged_step_instead_of_drawing_it():
    grpo = {**GRPO_ROW, "metrics": {**GRPO_ROW["metrics"], "loss_per_step": []}}
    text = checkpoint_curves_markdown([SFT_ROW, grpo])
    assert len(_pictures(text)) == 2 and "No step logged for: GRPO loss per step." in text
    only_sft = checkpoint_curves_markdown([SFT_ROW])  # grpo_max_steps 0: no GRPO row, nothing missing
    assert len(_pictures(only_sft)) == 1 and "No step logged" not in only_sft
