# SPDX-License-Identifier: Apache-2.0
"""The folder saturate puts first on PYTHONPATH for zero-change mode (`saturate profile|tune
--exec` on an unmodified script). Its sitecustomize.py chains to any other sitecustomize, then
calls saturate_client.zero_change.install(). Nothing here is meant to be imported by programs.
"""
