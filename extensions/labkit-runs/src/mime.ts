/**
 * The Dashboard's output type (``application/vnd.labkit.dashboard+json``), rendered by the
 * live cockpit (``cockpit.ts``). A mime extension: JupyterLab registers it in every notebook's
 * renderers at start. It is marked safe: it runs no code from the output and escapes every
 * text; an untrusted notebook gets the plots but not the control buttons.
 */
import type { IRenderMime } from '@jupyterlab/rendermime-interfaces';

import { CockpitRenderer, MIME_TYPE } from './cockpit';

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  createRenderer: () => new CockpitRenderer() as unknown as IRenderMime.IRenderer
};

const extension: IRenderMime.IExtension = {
  id: 'labkit-runs:dashboard',
  description: 'The live cockpit of a labkit run (what lk.notebook.Dashboard displays).',
  rendererFactory,
  // before text/html (the static copy the kernel adds for viewers without labkit)
  rank: 0,
  dataType: 'json'
};

export default extension;
