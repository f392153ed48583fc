"""The app's SVG screenshots, as the app's `s` and `interlock-demo screenshots` save them."""

from __future__ import annotations


def svg_keeping_spaces(svg: str) -> str:
    """A Textual SVG screenshot that keeps its runs of spaces in any SVG renderer.

    Textual's SVG relies on browsers keeping runs of spaces; librsvg (`rsvg-convert`) and
    others collapse them ("✗ wrongreported: sent") unless the document says to keep them.
    """
    if 'xml:space="preserve"' in svg.partition(">")[0]:
        return svg
    return svg.replace("<svg ", '<svg xml:space="preserve" ', 1)
