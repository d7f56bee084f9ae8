"""Masking secrets before a URL or a server's answer is written anywhere (errors, failure reasons,
manifests, notebooks, reprs).

What counts as a secret here:

* the user information of a URL (``http://user:password@host`` -> ``http://***@host``);
* the values of query parameters that carry credentials (``?api_key=...``, ``token``, ...);
* an ``Authorization`` / ``Proxy-Authorization`` / ``X-Api-Key`` header value echoed in a text,
  in header form (``Authorization: Bearer abc``) or JSON form (``"authorization": "Bearer abc"``);
* any ``Bearer <token>`` / ``Basic <token>`` credential;
* every literal string passed in ``secrets`` (the API key itself, URL passwords), wherever it
  appears, even split from its header;
* the value of a key named ``*_env`` (``api_key_env=...``) that is not the name of an environment
  variable: such a key names the variable that holds a secret, so anything else there is most likely
  the secret typed into the wrong key;
* the value of a key named as a credential (:func:`is_secret_key`: ``hf_token``, ``api_key``,
  ``password``, ``client_secret``, ... but not ``max_tokens`` or ``api_key_env``), in a mapping
  (``llm.engine_kwargs``) or written as ``key: value`` / ``key=value`` / ``"key": "value"`` in a text.

Use :func:`redact_url` for a URL that is shown or recorded, :func:`redact_text` for free text (a
server body, an error message), :func:`redact_params` for a parameter mapping (e.g. the ``llm``
section before it goes into a manifest).
"""
from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

# scheme://user[:password]@  (the user info ends at the last '@' before the host part)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<info>[^/?#\s@\"']*)@")
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|auth|password|passwd|secret|sig|signature)=)"
    r"(?P<value>[^&#\s\"']+)", re.IGNORECASE)
_HEADER = re.compile(
    r"(?P<name>\b(?:proxy-)?authorization|\bx-api-key|\bapi-key)(?P<sep>[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<value>(?:(?:bearer|basic|token)\s+)?[^\s\"',;}\]]+)", re.IGNORECASE)
# key_env=VALUE, key_env: VALUE, "key_env": "VALUE" (a --set item, a YAML line, JSON)
_ENV_KEY = re.compile(r"(?P<key>\b[A-Za-z0-9_]*_env[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s\"',}\]]+)", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a key whose value is a credential: its name ends in one of these words (hf_token, openai_api_key)
_SECRET_NAME = r"[A-Za-z0-9_\-]*(?:token|api[_-]?key|apikey|secret|password|passwd|credentials?)"
_SECRET_KEY = re.compile(_SECRET_NAME, re.IGNORECASE)
_SECRET_KEY_VALUE = re.compile(rf"(?P<key>\b{_SECRET_NAME}\b[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s\"',}}\]]+)",
                               re.IGNORECASE)
_SCHEME_TOKEN = re.compile(r"\b(?P<scheme>bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=\-]{4,})", re.IGNORECASE)


def url_secrets(url: str) -> list[str]:
    """The password and user name held in a URL's user information, and their HTTP basic-auth
    token (base64 of ``user:password``), for :func:`redact_text`."""
    out = []
    for m in _USERINFO.finditer(url or ""):
        info = m.group("info")
        user, _, pw = info.partition(":")
        out += [s for s in (pw, user) if s]
        if info:
            out.append(base64.b64encode(info.encode()).decode())
    return out


def redact_url(url: str) -> str:
    """``url`` with its user information and credential query values masked."""
    if not isinstance(url, str):
        return url
    url = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", url)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('key')}{MASK}", url)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL credentials, authorization headers, bearer/basic tokens and every string
    of ``secrets`` (only those of 4 characters or more, so that masking stays meaningful) masked."""
    if not isinstance(text, str) or not text:
        return text
    for s in sorted({s for s in secrets if isinstance(s, str) and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(s, MASK)
    text = redact_url(text)
    text = _ENV_KEY.sub(lambda m: m.group(0) if _ENV_NAME.fullmatch(m.group("value"))
                        else f"{m.group('key')}{MASK}", text)
    text = _SECRET_KEY_VALUE.sub(lambda m: f"{m.group('key')}{MASK}", text)
    text = _HEADER.sub(lambda m: f"{m.group('name')}{m.group('sep')}{MASK}", text)
    return _SCHEME_TOKEN.sub(lambda m: f"{m.group('scheme')} {MASK}", text)


def redact_params(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like value with every string passed through :func:`redact_text`."""
    secrets = list(secrets)
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {k: MASK if _secret_in_env_key(k, v) or is_secret_key(k, v) else redact_params(v, secrets)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_params(v, secrets) for v in obj)
    return obj


def _secret_in_env_key(key, value) -> bool:
    """A key named ``*_env`` holds the name of an environment variable; a text that is not one is
    masked whole (it is most likely the secret itself)."""
    return (isinstance(key, str) and key.lower().endswith("_env") and isinstance(value, str)
            and not _ENV_NAME.fullmatch(value))


def is_secret_key(key, value) -> bool:
    """Whether ``key: value`` of a mapping holds a credential: a key named as one (``hf_token``,
    ``api_key``, ``password``, ...; not ``max_tokens``, not ``api_key_env``) with a text or number
    (a flag such as ``use_auth_token: true`` is no secret)."""
    return (isinstance(key, str) and _SECRET_KEY.fullmatch(key) is not None and value is not None
            and not isinstance(value, bool) and isinstance(value, (str, int, float)) and value != MASK)
