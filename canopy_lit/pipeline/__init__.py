"""The evidence loop and its stages: config -> ``QuestionRunner`` (build), loop, controllers, scoring, traces.

Submodules are imported where used (``from canopy_lit.pipeline.build import build_loop``), so importing
the package stays cheap.
"""
