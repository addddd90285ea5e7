"""The grading API: a server outside the sandbox, a client inside, checkpoint validation."""
