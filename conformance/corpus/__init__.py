"""Upstream's own launches as a test suite (issue 23): a corpus rendered from upstream, judged by upstream.

``python -m conformance.corpus.build`` renders the corpus (where the upstream sources are available) and
records upstream's verdict on each entry; ``python -m conformance.corpus.agree`` checks that lint_config
agrees with every verdict. The stored data files hold values (facts), each with its source commit and path.
"""
