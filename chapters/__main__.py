"""The conformance table's command: `python -m chapters > docs/lesson-conformance.md` prints every claim."""

from chapters import CLAIMS
from core import lesson

print(lesson.markdown(CLAIMS), end="")
