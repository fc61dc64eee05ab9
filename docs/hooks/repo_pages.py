"""MkDocs hook: the site serves the repository's Markdown with the links GitHub resolves.

Pages link the way they read in the repository (``docs/reference.md`` -> ``../experiments/results.md``,
``README.md`` -> ``docs/METHOD.md``). This hook

- mounts the README (as ``overview.md``: ``index.md`` is the site's home), every ``experiments/*.md``
  and every repository file those pages or ``docs/`` link to (transitively: images, ``data/SOURCES.md``),
  at their repository paths;
- rewrites each relative link from its repository path to the mounted page before MkDocs validates it, so
  a link to a missing file or heading still fails ``mkdocs build --strict``, and MkDocs' warning names
  the page and the link as they are written in the repository;
- lists every mounted page the nav leaves out under its "Results" section (a study page added to
  experiments/ appears without an edit of mkdocs.yml);
- lets Markdown inside ``<details>`` blocks render (GitHub renders it; Python-Markdown needs
  ``markdown="1"`` and the ``md_in_html`` extension).
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from xml.etree.ElementTree import Element

from markdown import Extension, Markdown
from markdown.treeprocessors import Treeprocessor
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

# Repository files mounted whatever links to them (globs relative to the repository root).
SEEDS = ("README.md", "experiments/*.md")
# Mounted repository paths whose site path differs from the repository path.
RENAMED = {"README.md": "overview.md"}
# The nav section that collects mounted pages mkdocs.yml does not list.
RESULTS_SECTION = "Results"
# A Markdown link or image target, or an HTML src/href: what decides which files get mounted.
LINK_TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:src|href)=\"([^\"]+)\"")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
# MkDocs' link warnings (mkdocs/structure/pages.py): the page and the link as MkDocs saw them.
LINK_WARNING = re.compile(r"^Doc file '([^']+)' contains (a link|an unrecognized relative link) '([^']+)'")
TARGET_DOC = re.compile(r"(the doc|the target) '([^']+)'")


class _State:
    def __init__(self) -> None:
        self.root = Path()
        self.docs = "docs"  # docs_dir, relative to the repository root
        self.repo_path_of: dict[str, str] = {}  # site src_uri -> repository path, for every file in the site
        self.site_path_of: dict[str, str] = {}  # repository path -> site src_uri
        self.written_as: dict[tuple[str, str], str] = {}  # (page src_uri, rewritten link) -> link as written
        self.page: str | None = None  # src_uri of the page being rendered


state = _State()


def _is_relative(url: str) -> bool:
    parts = urlsplit(url)
    return not (parts.scheme or parts.netloc or url.startswith(("/", "#", "\\")) or "@" in url)


def _resolve(repo_page: str, link_path: str) -> str | None:
    """Repository path a relative link of ``repo_page`` points at (a folder: its README.md when it has
    one); None when the link leaves the repository."""
    target = posixpath.normpath(posixpath.join(posixpath.dirname(repo_page), link_path))
    if target.startswith("../") or target == "..":
        return None
    if (state.root / target).is_dir():
        readme = posixpath.join(target, "README.md")
        return readme if (state.root / readme).is_file() else target
    return target


def _site_path(repo_path: str) -> str:
    if repo_path in RENAMED:
        return RENAMED[repo_path]
    prefix = state.docs + "/"
    return repo_path.removeprefix(prefix)


def _linked_files(repo_page: str) -> set[str]:
    """Existing repository files the Markdown file ``repo_page`` links to (code blocks left out)."""
    text = FENCE.sub("", (state.root / repo_page).read_text(encoding="utf-8"))
    out = set()
    for match in LINK_TARGET.finditer(text):
        url = match.group(1) or match.group(2)
        if not _is_relative(url):
            continue
        target = _resolve(repo_page, urlsplit(url).path)
        if target and (state.root / target).is_file():
            out.add(target)
    return out


class _WrittenLinks(logging.Filter):
    """Rewrites MkDocs' link warnings to name the repository file and the link as written there."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        match = LINK_WARNING.match(message)
        if match:
            page, kind, link = match.groups()
            repo_page = state.repo_path_of.get(page, page)
            written = state.written_as.get((page, link), link)
            rest = TARGET_DOC.sub(
                lambda m: f"{m.group(1)} '{state.repo_path_of.get(m.group(2), m.group(2))}'",
                message[match.end() :],
            )
            record.msg = f"Doc file '{repo_page}' contains {kind} '{written}'{rest}"
            record.args = ()
        return True


_LINK_LOGGER = logging.getLogger("mkdocs.structure.pages")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    state.__init__()
    docs_dir = Path(config.docs_dir).resolve()
    state.root = docs_dir.parent  # docs/ sits at the repository root
    state.docs = docs_dir.name
    config.markdown_extensions.append(_RepoLinksExtension())  # type: ignore[arg-type]  # an instance is valid
    for stale in [f for f in _LINK_LOGGER.filters if type(f).__name__ == _WrittenLinks.__name__]:
        _LINK_LOGGER.removeFilter(stale)  # an earlier build's hook module (MkDocs loads it per config)
    _LINK_LOGGER.addFilter(_WrittenLinks())
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    state.repo_path_of = {f.src_uri: f"{state.docs}/{f.src_uri}" for f in files}
    state.site_path_of = {repo: site for site, repo in state.repo_path_of.items()}
    queue = sorted({p.relative_to(state.root).as_posix() for seed in SEEDS for p in state.root.glob(seed)})
    queue += [repo for site, repo in state.repo_path_of.items() if site.endswith(".md")]
    seen = set(queue)
    mounted = []
    while queue:
        repo = queue.pop()
        if repo not in state.site_path_of:
            site = _site_path(repo)
            files.append(File.generated(config, site, abs_src_path=str(state.root / repo)))
            state.repo_path_of[site] = repo
            state.site_path_of[repo] = site
            mounted.append(site)
        if repo.endswith(".md"):
            for target in _linked_files(repo) - seen:
                seen.add(target)
                queue.append(target)
    _list_unlisted_pages(config, [site for site in mounted if site.endswith(".md")])
    return files


def _nav_paths(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_nav_paths(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_nav_paths(v) for v in nav))
    return set()


def _list_unlisted_pages(config: MkDocsConfig, pages: list[str]) -> None:
    listed = _nav_paths(config.nav)
    section = next((e for e in config.nav or [] if isinstance(e, dict) and RESULTS_SECTION in e), None)
    if section is None:
        return  # no section to fill: MkDocs reports unlisted pages itself (validation.omitted_files)
    section[RESULTS_SECTION].extend(p for p in sorted(pages) if p not in listed)


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    state.page = page.file.src_uri
    return markdown.replace("<details>", '<details markdown="1">')


def on_post_build(config: MkDocsConfig) -> None:
    state.page = None


class _RepoLinksTreeprocessor(Treeprocessor):
    """Points repository-relative ``href``/``src`` values at the mounted file (runs before MkDocs' own)."""

    def run(self, root: Element) -> None:
        page = state.page
        repo_page = state.repo_path_of.get(page) if page else None
        if page is None or repo_page is None:  # a docstring rendered outside a page
            return
        for element in root.iter():
            for attr in ("href", "src"):
                url = element.get(attr)
                if url and _is_relative(url):
                    rewritten = self._rewrite(page, repo_page, url)
                    state.written_as[(page, rewritten)] = url
                    element.set(attr, rewritten)

    @staticmethod
    def _rewrite(page: str, repo_page: str, url: str) -> str:
        parts = urlsplit(url)
        target = _resolve(repo_page, parts.path) if parts.path else None
        site = state.site_path_of.get(target) if target else None
        if site is None:
            return url  # MkDocs reports it (a broken link fails --strict)
        path = posixpath.relpath(site, posixpath.dirname(page) or ".")
        return urlunsplit(("", "", path, parts.query, parts.fragment))


class _RepoLinksExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802  (Python-Markdown's name)
        md.treeprocessors.register(_RepoLinksTreeprocessor(md), "canopy_repo_links", 2)
