"""The What-if form when the model refuses a value (issue 38): the field keeps what the learner typed, and the
refusal is said on this page even when it is about an input the page does not show."""

import re

from app import create_app
from core.config import Config


def field(html: str, name: str) -> tuple[str, str]:
    """An input's value and the message under it, as the page renders them."""
    value = re.search(rf'<input type="number" id="mi-{name}" name="{name}" value="([^"]*)"', html)
    err = re.search(rf'data-testid="err-{name}"[^>]*>([^<]*)</span>', html)
    assert value and err, f"no What-if field {name}"
    return value.group(1), err.group(1)


def test_a_mean_above_the_hidden_p99_keeps_the_typed_value_and_says_why_it_was_refused():
    client = create_app(Config(testing=True)).test_client()
    html = client.get("/chapters/0?transcode_mean_s=1200").get_data(as_text=True)
    value, err = field(html, "transcode_mean_s")
    assert value == "1200", "the typed 1,200 stays in the field: it is not turned back into 600"
    assert "900" in err and "1200" in err and "not an input on this page" in err, err
    # a value the model takes shows no message
    html = client.get("/chapters/0?transcode_mean_s=800").get_data(as_text=True)
    assert field(html, "transcode_mean_s")[1] == ""
