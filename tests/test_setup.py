"""What `make setup` promises: DeepSpeed's CPU ops prebuilt, so no run pays a JIT compile."""


def test_deepspeed_cpu_ops_are_prebuilt():
    from deepspeed.git_version_info import installed_ops

    assert installed_ops.get("cpu_adam"), "DeepSpeed CPU Adam was not prebuilt: run `make setup`"
    assert installed_ops.get("deepspeed_shm_comm"), "DeepSpeed shared-memory comm op was not prebuilt"
