"""The one exception type for bad user input.

Raise ``UserError("what is wrong; the command or key that fixes it")`` wherever a user's path, config
or data is at fault. The entry points catch it and print the message as one line, with no traceback.
"""


class UserError(Exception):
    """Bad input from the user: printed as one line naming the fix, never as a traceback."""
