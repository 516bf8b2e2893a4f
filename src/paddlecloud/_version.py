"""Version numbers: the package release and the REST API version negotiated with clients."""

__version__ = "0.1.0"

#: Version of the ``/api/v1`` wire contract. Bumped on every backwards-compatible addition;
#: a breaking change moves the prefix to ``/api/v2``.
API_VERSION = 1

#: Oldest client API version the server still answers. Older clients get ``client_too_old``.
MIN_CLIENT_API_VERSION = 1

#: Oldest server API version this client can talk to.
MIN_SERVER_API_VERSION = 1
