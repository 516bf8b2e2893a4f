from paddlecloud.core.phases import JobPhase


def test_scratch(platform, alice, make_package, drive):
    pkg = make_package(
        {"main.py": "import six; print('six', six.__version__)\n", "requirements.txt": "six\n"}
    )
    alice.submit({"name": "s", "entry": "python main.py"}, pkg)
    job = drive(alice, "s", {JobPhase.SUCCEEDED, JobPhase.FAILED}, timeout=120)
    print(job.phase, job.message)
    print("".join(alice.logs("s")))
    print("".join(alice.logs("s", worker="prepare")))
