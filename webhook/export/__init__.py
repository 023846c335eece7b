"""A placement policy compiled to ValidatingAdmissionPolicy and MutatingAdmissionPolicy
(``admissionregistration.k8s.io/v1``, CEL evaluated inside the API server).

Pure, like the engine it mirrors: a ``Policy`` in, plain objects and text out; no cluster I/O.
"""

from webhook.export.policies import NOT_EXPRESSED, Export, export, names
from webhook.export.render import HEADER, render_json, render_yaml

__all__ = ["HEADER", "NOT_EXPRESSED", "Export", "export", "names", "render_json", "render_yaml"]
