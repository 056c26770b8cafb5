"""MPC clusters on EC2: provision (`up`), list (`status`) and remove (`down`).

Every resource is tagged ``ltm-harness:cluster=<name>`` and
``ltm-harness:managed=true``; `down` and `status` find resources by those tags
alone, so they work from any machine with the same AWS account. Only the
standard AWS configuration is used (profiles, ``AWS_DEFAULT_REGION``,
``AWS_ENDPOINT_URL``), so the code can equally be pointed at an EC2 emulator.

The modules, each importing only those before it:

- :mod:`.state`: names, tags, the data returned to callers, the record of
  what one `up` created, and the files kept on this machine;
- :mod:`.session`: boto3 sessions, AWS errors as one line, the yes/no question,
  the caller's address;
- :mod:`.lookup`: the image, subnet and placement strategy; `status`;
- :mod:`.teardown`: `down`, and the rollback of a failed `up`;
- :mod:`.provision`: `up`.

The public names are exported by the package above (:mod:`harness.infra`).
"""
