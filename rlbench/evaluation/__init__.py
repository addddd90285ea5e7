"""The harness's own evaluation: fixed, seeded protocols on hidden splits."""
