"""`python -m runtime.gunicorn_main …`: gunicorn, with gevent's ssl patch applied before anything imports ssl.

gunicorn's own modules import ssl at start-up, long before the gevent worker monkey-patches (in the
forked worker), so every start printed gevent's MonkeyPatchWarning ("Monkey-patching ssl after ssl has
already been imported"), which a newcomer reads as an error. Patching ssl here, first, makes the worker's
later `patch_all()` find it already done. Only ssl: the master keeps its plain signals, fork and select.
"""

from gevent import monkey

monkey.patch_ssl()

from gunicorn.app.wsgiapp import run  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    run()
