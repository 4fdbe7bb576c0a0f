"""Verifies Chime's callback signatures with the `standardwebhooks` package (PyPI), an
implementation independent of Chime's own. Reads {"secret": "whsec_…", "messages":
[{"headers": {…}, "body": "…"}]} on stdin and prints one line per message: "ok", or
"refused: <reason>"."""

import json
import sys

from standardwebhooks.webhooks import Webhook

request = json.load(sys.stdin)
hook = Webhook(request["secret"])
for message in request["messages"]:
    try:
        hook.verify(message["body"].encode(), message["headers"], json_parse=False)
        print("ok")
    except Exception as e:  # the library raises WebhookVerificationError, and others on bad input
        print(f"refused: {type(e).__name__}: {e}")
