"""`ssetape web`: a read-only viewer of a store in the browser, served by the package itself.

Pages are rendered on the server from :class:`ssetape.storage.queries.Queries`; everything
recorded (stream text, model names, headers, URLs) is attacker-controlled and is escaped
where it is written into a page (:mod:`ssetape.web.html`). Assets are package data, so the
viewer works offline, under a Content-Security-Policy that runs no inline script.
"""
