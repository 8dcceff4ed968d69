"""MkDocs hook: docs/settings.md's table of settings is generated at build time from the core's
table (``hvdlite.config``, the same output as ``python -m hvdlite --settings``), so the page cannot
drift from the code. The build fails when the page has lost its marker."""
from hvdlite import config as hvdlite_config

MARKER = "<!-- settings table: generated from hvdlite.config at build time -->"


def with_settings_table(markdown):
    if MARKER not in markdown:
        raise ValueError(f"docs/settings.md has lost its marker line {MARKER!r}")
    return markdown.replace(MARKER, hvdlite_config.markdown_table())


def on_page_markdown(markdown, page, config, files, **kwargs):
    if page.file.src_uri == "settings.md":
        return with_settings_table(markdown)
    return markdown
