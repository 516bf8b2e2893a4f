"""The URLs ``up`` derives from its bind address: the client config's and the workers' API URL
(issue 25: ``up --host 0.0.0.0`` handed Slurm workers ``http://127.0.0.1:PORT``)."""

from __future__ import annotations

from paddlecloud.server.addresses import server_urls, this_host

HOSTS = {"head.cluster": ["10.77.0.1"], "head": ["10.77.0.1"], "deb": ["127.0.1.1"], "v6": ["::1", "fd00::1"]}


def _resolve(name: str) -> list[str]:
    return HOSTS.get(name, [])


def test_a_wildcard_bind_gives_remote_workers_this_hosts_name_and_clients_loopback() -> None:
    urls = server_urls("http", "0.0.0.0", 8080, remote_workers=True, host_name=lambda: "head.cluster")
    assert (urls.client, urls.worker) == ("http://127.0.0.1:8080", "http://head.cluster:8080")
    assert urls.warning == ""
    assert "name" in urls.source


def test_local_workers_keep_loopback_and_a_given_or_bound_address_wins() -> None:
    assert server_urls("http", "0.0.0.0", 80, host_name=lambda: "head").worker == "http://127.0.0.1:80"
    given = server_urls("https", "::", 443, api_url="https://api.example:443/", remote_workers=True)
    assert (given.client, given.worker) == ("https://127.0.0.1:443", "https://api.example:443")
    bound = server_urls("http", "10.77.0.1", 8080, remote_workers=True, host_name=lambda: "head")
    assert bound.worker == bound.client == "http://10.77.0.1:8080"
    assert server_urls("http", "fd00::1", 9, remote_workers=True).client == "http://[fd00::1]:9"


def test_no_reachable_name_keeps_loopback_and_says_what_to_give() -> None:
    urls = server_urls("http", "", 8080, remote_workers=True, host_name=lambda: "")
    assert urls.worker == "http://127.0.0.1:8080"
    assert "--api-url http://ADDRESS:8080" in urls.warning


def test_this_host_is_the_first_name_resolving_past_loopback() -> None:
    assert this_host(_resolve, ["deb", "head.cluster", "head"]) == "head.cluster"
    assert this_host(_resolve, ["deb", "nowhere"]) == ""
    assert this_host(_resolve, ["v6"]) == "v6"  # one address that is not loopback is enough
